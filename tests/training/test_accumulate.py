"""accumulate_and_step: the one optimizer step SFT, DPO and RL share."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.training.optim import (
    NonFiniteError,
    NonFiniteGuard,
    Optimized,
    accumulate_and_step,
    make_optimizer,
    make_scheduler,
    restart_schedule,
)


def _linear(seed: int = 0) -> tuple[torch.nn.Linear, Optimized]:
    torch.manual_seed(seed)
    layer = torch.nn.Linear(4, 1)
    optimizer = make_optimizer(layer.parameters(), lr=0.1)
    return layer, Optimized(
        list(layer.parameters()), optimizer, make_scheduler(optimizer, warmup_steps=2, total_steps=4)
    )


def test_micro_batches_add_up_to_the_whole_batch() -> None:
    x, y = torch.randn(6, 4), torch.randn(6)
    whole, whole_group = _linear()
    split, split_group = _linear()
    guard = NonFiniteGuard(3, hint="")
    one = accumulate_and_step(
        [((whole(x).squeeze(-1) - y) ** 2).sum() / 6], [whole_group], max_grad_norm=0.5, guard=guard
    )
    micro = (((split(x[i : i + 2]).squeeze(-1) - y[i : i + 2]) ** 2).sum() / 6 for i in range(0, 6, 2))
    two = accumulate_and_step(micro, [split_group], max_grad_norm=0.5, guard=guard)
    assert one.loss == pytest.approx(two.loss) and one.grad_norm == pytest.approx(two.grad_norm)
    assert one.lr == two.lr == 0.05  # warmup step 1 of 2, read before the scheduler advances
    assert not one.skipped and whole_group.scheduler.get_last_lr()[0] == 0.1
    for a, b in zip(whole.parameters(), split.parameters()):
        torch.testing.assert_close(a, b)
        assert a.grad is None  # freed after the step


def test_non_finite_steps_never_reach_the_weights_and_stop_after_the_limit() -> None:
    layer, group = _linear()
    _, critic = _linear(seed=1)
    before = [p.detach().clone() for p in layer.parameters()]
    guard = NonFiniteGuard(2, hint="lower the lr")
    outcome = accumulate_and_step(
        [layer(torch.ones(1, 4)).sum() * float("nan")], [group], max_grad_norm=1.0, guard=guard
    )
    assert outcome.skipped and guard.in_a_row == 1
    assert all(torch.equal(p, b) and p.grad is None for p, b in zip(layer.parameters(), before))
    assert group.scheduler.get_last_lr()[0] == 0.05  # the schedule does not advance either
    finite = accumulate_and_step([layer(torch.ones(1, 4)).sum()], [group], max_grad_norm=1.0, guard=guard)
    assert not finite.skipped and guard.in_a_row == 0
    # a non-finite norm in a second group (the critic) makes the whole step non-finite
    critic_weight = critic.params[0]
    critic_weight.register_hook(lambda grad: grad * float("inf"))  # a finite loss, an infinite critic gradient
    outcome = accumulate_and_step(
        [layer(torch.ones(1, 4)).sum() + critic_weight.sum()], [group, critic], max_grad_norm=1.0, guard=guard
    )
    assert outcome.skipped and outcome.loss == outcome.loss and outcome.norms[0] == outcome.norms[0]
    assert outcome.grad_norm != outcome.grad_norm and outcome.norms[1] == float("inf")
    with pytest.raises(NonFiniteError, match="2 non-finite .*lower the lr"):
        accumulate_and_step([layer(torch.ones(1, 4)).sum() * float("inf")], [group], max_grad_norm=1.0, guard=guard)


def test_a_restarted_schedule_follows_the_new_lr_and_length_and_is_exact_when_unchanged() -> None:
    def scheduled(lr: float, total: int, state=None):
        optimizer = make_optimizer(torch.nn.Linear(2, 2).parameters(), lr=lr)
        scheduler = make_scheduler(optimizer, warmup_steps=1, total_steps=total, schedule="cosine")
        if state is not None:  # a resume: the checkpoint's optimizer and scheduler, then the run's config
            optimizer.load_state_dict(state[0])
            scheduler.load_state_dict(state[1])
            restart_schedule(scheduler, lr)
        return optimizer, scheduler

    optimizer, scheduler = scheduled(1e-3, 10)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    state = (optimizer.state_dict(), scheduler.state_dict())
    same, _ = scheduled(1e-3, 10, state)
    assert same.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]  # bit for bit
    longer, longer_scheduler = scheduled(5e-4, 20, state)
    fresh_optimizer, fresh = scheduled(5e-4, 20)
    for _ in range(3):
        fresh_optimizer.step()
        fresh.step()
    assert longer.param_groups[0]["lr"] == pytest.approx(fresh_optimizer.param_groups[0]["lr"])
    longer.step()
    longer_scheduler.step()
    fresh_optimizer.step()
    fresh.step()
    assert longer_scheduler.get_last_lr() == pytest.approx(fresh.get_last_lr())

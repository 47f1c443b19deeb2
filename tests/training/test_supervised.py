"""The supervised loop SFT and DPO share, with a toy objective on the tiny random model:
batches, micro-batches, skipped batches and steps, the metrics an objective names, and
exact gradient accumulation."""

from __future__ import annotations

import copy
import math
from collections import Counter

import pytest
import torch

from agentic_rl.config import SFTConfig
from agentic_rl.distributed import DistContext
from agentic_rl.training.batch import collate
from agentic_rl.training.optim import StepOutcome
from agentic_rl.training.supervised import shuffled_batches, step_record, train_supervised

pytestmark = pytest.mark.usefixtures("one_thread")


class ToyObjective:
    """Negative log-likelihood of fixed token rows (row i: i + 4 tokens, loss on its last
    half; ``empty`` rows have no loss token); ``poisoned`` rows make their step's loss NaN.
    Records what the loop asked of it."""

    metric_names = ("step", "rows", "loss", "epoch", "grad_norm", "lr", "first_row")
    nonfinite_hint = "toy"

    def __init__(self, size: int, micro_rows: int, empty=(), poisoned=()) -> None:
        self.rows = [list(range(10, 14 + i)) for i in range(size)]
        self.masks = [
            [0] * (len(r) // 2) + [0 if i in empty else 1] * (len(r) - len(r) // 2) for i, r in enumerate(self.rows)
        ]
        self.micro_rows, self.poisoned = micro_rows, set(poisoned)
        self.trained: list[list[int]] = []  # each step's rows, as the micro-batches covered them

    def normaliser(self, batch):
        return sum(sum(self.masks[i][1:]) for i in batch)

    def micro_batches(self, share):
        self.trained.append([])
        return [share[i : i + self.micro_rows] for i in range(0, len(share), self.micro_rows)]

    def micro_loss(self, forward, members, normaliser):
        self.trained[-1].extend(members)
        micro = collate([self.rows[i] for i in members], [self.masks[i] for i in members], pad_token_id=0)
        logprobs, _ = forward(micro.input_ids, micro.attention_mask, micro.loss_mask)
        loss = -(logprobs * micro.loss_mask).sum() / normaliser
        return (loss * float("nan") if self.poisoned & set(members) else loss), members[0]

    def step_metrics(self, batch, normaliser, details, dist):
        return {"rows": len(batch), "first_row": details[0]}


def _train(tiny, objective, size, **config):
    model = copy.deepcopy(tiny[0])
    steps = []
    config = SFTConfig(**{"epochs": 2, "lr": 1e-3, "batch_size": 3, "warmup_steps": 0, **config})
    run = train_supervised(model, size, objective, config, pad_id=0, on_step=steps.append, dist=DistContext())
    return model, run, steps


def test_shuffled_batches_cover_every_item_once_per_epoch_and_follow_the_seed() -> None:
    batches = list(shuffled_batches(7, 3, 2, seed=5))
    assert [epoch for epoch, _ in batches] == [0, 0, 0, 1, 1, 1]
    assert [len(batch) for _, batch in batches] == [3, 3, 1] * 2
    for epoch in (0, 1):
        assert sorted(i for e, batch in batches if e == epoch for i in batch) == list(range(7))
    assert list(shuffled_batches(7, 3, 2, seed=5)) == batches
    assert list(shuffled_batches(7, 3, 2, seed=6)) != batches


def test_a_step_record_has_the_objectives_names_in_its_order() -> None:
    outcome = StepOutcome(loss=1.5, grad_norm=0.25, norms=[0.25], lr=1e-3, skipped=False)
    record = step_record(("loss", "pairs", "step", "lr"), 4, 1, outcome, {"pairs": 8, "unnamed": 1})
    assert list(record.items()) == [("loss", 1.5), ("pairs", 8), ("step", 4), ("lr", 1e-3)]


def test_every_row_trains_once_per_epoch_in_micro_batches_and_the_metrics_are_the_named_ones(tiny) -> None:
    objective = ToyObjective(size=5, micro_rows=2)
    model, run, steps = _train(tiny, objective, 5)
    assert [list(s) for s in steps] == [list(ToyObjective.metric_names)] * 4
    assert [s["step"] for s in steps] == [1, 2, 3, 4] and [s["epoch"] for s in steps] == [0, 0, 1, 1]
    assert [s["rows"] for s in steps] == [3, 2, 3, 2]
    assert Counter(i for rows in objective.trained for i in rows) == Counter({i: 2 for i in range(5)})
    assert [s["first_row"] for s in steps] == [rows[0] for rows in objective.trained]
    assert run.metrics == steps and run.metrics[0] is not steps[0]  # on_step gets a copy
    assert run.values("loss") == [s["loss"] for s in steps] and run.skipped_nonfinite == 0
    assert all(math.isfinite(s["loss"]) and s["loss"] > 0 for s in steps)
    assert not model.training


def test_a_batch_without_loss_tokens_is_no_step(tiny) -> None:
    objective = ToyObjective(size=4, micro_rows=1, empty={2})
    _, run, steps = _train(tiny, objective, 4, batch_size=1, epochs=1)
    assert [s["step"] for s in steps] == [1, 2, 3] and run.skipped_nonfinite == 0
    assert sorted(s["first_row"] for s in steps) == [0, 1, 3] and len(objective.trained) == 3


def test_a_non_finite_step_changes_no_weight_and_is_counted(tiny) -> None:
    model, run, steps = _train(tiny, ToyObjective(size=4, micro_rows=2, poisoned={1}), 4, batch_size=4, epochs=1)
    assert steps == [] and run.skipped_nonfinite == 1
    for a, b in zip(model.parameters(), tiny[0].parameters()):
        assert torch.equal(a, b)
    _, run, steps = _train(tiny, ToyObjective(size=4, micro_rows=1, poisoned={1}), 4, batch_size=1, epochs=1)
    assert run.skipped_nonfinite == 1 and [s["step"] for s in steps] == [1, 2, 3]
    assert sorted(s["first_row"] for s in steps) == [0, 2, 3]


def test_gradient_accumulation_is_exact(tiny) -> None:
    runs = [_train(tiny, ToyObjective(size=6, micro_rows=rows), 6, batch_size=6) for rows in (1, 6)]
    (one_model, one, _), (all_model, whole, _) = runs
    assert one.values("loss") == pytest.approx(whole.values("loss"), rel=1e-5)
    for a, b in zip(one_model.parameters(), all_model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert not torch.equal(next(tiny[0].parameters()), next(one_model.parameters()))  # the steps moved the weights

"""DPO / IPO loss against hand-computed values and a plain loop."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algorithms.dpo import dpo_loss, sequence_logprobs


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


def test_dpo_hand_values() -> None:
    # pair 1: h = (-10 - -12) - (-15 - -14) = 2 - (-1) = 3; pair 2: h = (-5 - -4) - (-6 - -6) = -1
    out = dpo_loss(
        torch.tensor([-10.0, -5.0]),
        torch.tensor([-15.0, -6.0]),
        torch.tensor([-12.0, -4.0]),
        torch.tensor([-14.0, -6.0]),
        beta=0.5,
    )
    expected = (-log_sigmoid(1.5) - log_sigmoid(-0.5)) / 2
    assert float(out.loss) == pytest.approx(expected, rel=1e-6)
    assert out.chosen_rewards.tolist() == pytest.approx([1.0, -0.5])
    assert out.rejected_rewards.tolist() == pytest.approx([-0.5, 0.0])
    assert out.margins.tolist() == pytest.approx([1.5, -0.5])
    assert out.accuracy == 0.5


def test_equal_policy_and_reference_give_log_2() -> None:
    values = torch.tensor([-3.0, -7.0, -1.0])
    out = dpo_loss(values, values - 1, values, values - 1, beta=0.1)
    assert float(out.loss) == pytest.approx(math.log(2))


def test_label_smoothing_and_ipo_hand_values() -> None:
    args = (torch.tensor([-10.0]), torch.tensor([-15.0]), torch.tensor([-12.0]), torch.tensor([-14.0]))  # h = 3
    smoothed = dpo_loss(*args, beta=0.5, label_smoothing=0.1)
    assert float(smoothed.loss) == pytest.approx(-0.9 * log_sigmoid(1.5) - 0.1 * log_sigmoid(-1.5), rel=1e-6)
    ipo = dpo_loss(*args, beta=0.5, loss_type="ipo")
    assert float(ipo.loss) == pytest.approx((3 - 1 / (2 * 0.5)) ** 2)


def test_matches_a_plain_loop_and_its_gradient_pushes_chosen_up() -> None:
    torch.manual_seed(0)
    policy_chosen = torch.randn(6, requires_grad=True)
    policy_rejected = torch.randn(6, requires_grad=True)
    reference_chosen, reference_rejected = torch.randn(6), torch.randn(6)
    beta = 0.3
    out = dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=beta)
    chosen, rejected = policy_chosen.detach(), policy_rejected.detach()
    total = 0.0
    for i in range(6):
        h = (float(chosen[i]) - float(reference_chosen[i])) - (float(rejected[i]) - float(reference_rejected[i]))
        total += -log_sigmoid(beta * h)
    assert out.loss.item() == pytest.approx(total / 6, rel=1e-5)
    out.loss.backward()
    assert (policy_chosen.grad < 0).all() and (policy_rejected.grad > 0).all()  # descent raises chosen, lowers rejected


def test_sequence_logprobs_sum_and_mean_over_the_mask() -> None:
    logprobs = torch.tensor([[-1.0, -2.0, -3.0, -4.0], [-1.0, -1.0, 0.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    assert sequence_logprobs(logprobs, mask).tolist() == [-5.0, -2.0]
    assert sequence_logprobs(logprobs, mask, average=True).tolist() == [-2.5, -1.0]


def test_bad_arguments() -> None:
    one = torch.zeros(1)
    with pytest.raises(ValueError, match="loss_type"):
        dpo_loss(one, one, one, one, loss_type="hinge-ish")
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(one, one, one, one, beta=0.0)

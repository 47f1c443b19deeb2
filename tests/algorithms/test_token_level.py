"""GAE over sampled tokens, masked whitening, REINFORCE++ and the value loss: hand values and plain loops."""

import math
import random

import pytest
import torch

from agentic_rl.algorithms import (
    AdvantageInputs,
    compute_advantages,
    discounted_token_returns,
    gae,
    masked_whiten,
    outcome_token_rewards,
    value_loss,
)


def _loop_gae(rewards, values, mask, gamma, lam):
    """Plain per-row loop: gather the sampled positions, run textbook GAE on them."""
    advantages = [[0.0] * len(mask[0]) for _ in mask]
    for b, row in enumerate(mask):
        steps = [t for t, m in enumerate(row) if m]
        running = 0.0
        for i in reversed(range(len(steps))):
            t = steps[i]
            next_value = values[b][steps[i + 1]] if i + 1 < len(steps) else 0.0
            delta = rewards[b][t] + gamma * next_value - values[b][t]
            running = delta + gamma * lam * running
            advantages[b][t] = running
    return advantages


def test_gae_skips_observation_tokens_inside_a_response_hand_values():
    # prompt | turn 1 (pos 1-2) | observation (pos 3-4) | turn 2 (pos 5-6)
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1]])
    values = torch.tensor([[9.0, 0.5, 0.6, 9.0, 9.0, 0.7, 0.8]])  # 9s sit on unsampled tokens: ignored
    rewards = torch.tensor([[0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 1.0]])  # the 5 is on an observation token: ignored
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # delta6 = 1 - .8 = .2; delta5 = .9*.8 - .7 = .02; delta2 = .9*.7 - .6 = .03 (bootstraps over the
    # observation to position 5); delta1 = .9*.6 - .5 = .04; A_t = delta_t + .72 * A_next
    a6 = 0.2
    a5 = 0.02 + 0.72 * a6
    a2 = 0.03 + 0.72 * a5
    a1 = 0.04 + 0.72 * a2
    expected = torch.tensor([[0.0, a1, a2, 0.0, 0.0, a5, a6]])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, expected + torch.tensor([[0.0, 0.5, 0.6, 0.0, 0.0, 0.7, 0.8]]), atol=1e-6)
    assert returns[0, 6].item() == pytest.approx(1.0)


def test_gae_matches_plain_loop_on_random_masked_batches():
    generator = torch.Generator().manual_seed(0)
    for gamma, lam in [(1.0, 1.0), (0.99, 0.95), (0.5, 0.0)]:
        mask = (torch.rand(5, 13, generator=generator) > 0.4).long()
        mask[2] = 0  # a row with no sampled token
        rewards = torch.randn(5, 13, generator=generator)
        values = torch.randn(5, 13, generator=generator)
        advantages, returns = gae(rewards, values, mask, gamma=gamma, lam=lam)
        expected = torch.tensor(_loop_gae((rewards * mask).tolist(), values.tolist(), mask.tolist(), gamma, lam))
        assert torch.allclose(advantages, expected, atol=1e-5)
        assert torch.allclose(returns, (expected + values) * mask, atol=1e-5)


def test_lambda_one_gives_monte_carlo_returns_minus_values():
    mask = torch.tensor([[1, 1, 0, 1]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 2.0]])
    values = torch.tensor([[0.3, -0.1, 0.0, 0.4]])
    advantages, returns = gae(rewards, values, mask, gamma=0.5, lam=1.0)
    # Monte Carlo return over sampled steps: G = [2 * .25, 2 * .5, -, 2]
    assert torch.allclose(returns, torch.tensor([[0.5, 1.0, 0.0, 2.0]]))
    assert torch.allclose(advantages, torch.tensor([[0.2, 1.1, 0.0, 1.6]]))


def test_masked_whiten_hand_values_and_ignores_unmasked():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, -50.0, 4.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    out = masked_whiten(x, mask)
    # masked values 1, 2, 3, 4: mean 2.5, unbiased var 5/3
    scale = 1 / math.sqrt(5 / 3 + 1e-8)
    assert torch.allclose(
        out, torch.tensor([[-1.5 * scale, -0.5 * scale, 0.0], [0.5 * scale, 0.0, 1.5 * scale]]), atol=1e-6
    )


def test_outcome_token_rewards_on_the_last_sampled_token():
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 2.0, 3.0]),
        response_mask=torch.tensor([[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]]),
        group_index=torch.tensor([0, 0, 0]),
    )
    assert outcome_token_rewards(inputs).tolist() == [[0, 0, 1, 0], [2, 0, 0, 0], [0, 0, 0, 0]]


def test_gae_estimator_whitens_and_needs_values():
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 0, 0, 0]])
    values = torch.tensor([[0.0, 0.2, 0.1, 0.0, 0.5], [0.3, 0.3, 0.0, 0.0, 0.0]])
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0]), response_mask=mask, group_index=torch.tensor([0, 1]), values=values
    )
    raw, _ = gae(outcome_token_rewards(inputs), values, mask, gamma=1.0, lam=0.95)
    assert torch.allclose(compute_advantages("gae", inputs, gamma=1.0, lam=0.95, whiten=False), raw)
    whitened = compute_advantages("gae", inputs, gamma=1.0, lam=0.95)
    assert torch.allclose(whitened, masked_whiten(raw, mask))
    assert whitened[mask.bool()].mean().abs() < 1e-6
    with pytest.raises(ValueError, match="critic values"):
        compute_advantages(
            "gae", AdvantageInputs(rewards=torch.ones(2), response_mask=mask, group_index=torch.tensor([0, 1]))
        )


def test_discounted_token_returns_hand_values():
    mask = torch.tensor([[1, 0, 1, 1]])
    rewards = torch.tensor([[-0.1, 0.0, -0.1, 1.0]])  # e.g. a KL penalty on every sampled token, outcome at the end
    returns = discounted_token_returns(rewards, mask, gamma=0.5)
    assert torch.allclose(returns, torch.tensor([[-0.1 + 0.5 * (-0.1 + 0.5), 0.0, -0.1 + 0.5, 1.0]]))


def _loop_reinforce(token_rewards, mask, gamma, group_means=None):
    rows = []
    for b, row in enumerate(mask):
        rewards = list(token_rewards[b])
        steps = [t for t, m in enumerate(row) if m]
        if group_means is not None and steps:
            rewards[steps[-1]] -= group_means[b]
        out, running = [0.0] * len(row), 0.0
        for t in reversed(steps):
            running = rewards[t] + gamma * running
            out[t] = running
        rows.append(out)
    flat = [rows[b][t] for b in range(len(mask)) for t in range(len(mask[0])) if mask[b][t]]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((x - mean) ** 2 for x in flat) / (len(flat) - 1) + 1e-8)
    return [[(rows[b][t] - mean) / std if mask[b][t] else 0.0 for t in range(len(mask[0]))] for b in range(len(mask))]


def test_reinforce_plus_plus_matches_loop_with_and_without_baseline():
    rng = random.Random(0)
    mask = [[0, 1, 1, 0, 1, 1], [0, 1, 1, 1, 0, 0], [0, 1, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]]
    outcome = [1.0, 0.0, 1.0, 1.0]
    groups = [0, 0, 1, 1]
    token_rewards = [[(-0.01 * rng.random() if m else 0.0) for m in row] for row in mask]
    for b, row in enumerate(mask):
        token_rewards[b][max(t for t, m in enumerate(row) if m)] += outcome[b]
    inputs = AdvantageInputs(
        rewards=torch.tensor(outcome),
        response_mask=torch.tensor(mask),
        group_index=torch.tensor(groups),
        token_rewards=torch.tensor(token_rewards),
    )
    plain = compute_advantages("reinforce++", inputs, gamma=0.9)
    assert torch.allclose(plain, torch.tensor(_loop_reinforce(token_rewards, mask, 0.9)), atol=1e-5)
    baseline = compute_advantages("reinforce++-baseline", inputs, gamma=0.9)
    means = [0.5, 0.5, 1.0, 1.0]
    assert torch.allclose(baseline, torch.tensor(_loop_reinforce(token_rewards, mask, 0.9, means)), atol=1e-5)


def test_reinforce_plus_plus_default_rewards_hand_values():
    # No token rewards: the outcome sits on the last sampled token; gamma 1 spreads it back.
    mask = torch.tensor([[1, 1], [1, 1]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 0.0]), response_mask=mask, group_index=torch.tensor([0, 0]))
    out = compute_advantages("reinforce++", inputs)
    # returns [1, 1, 0, 0]: mean .5, unbiased std sqrt(1/3)
    value = 0.5 / math.sqrt(1 / 3 + 1e-8)
    assert torch.allclose(out, torch.tensor([[value, value], [-value, -value]]), atol=1e-6)
    # with the group-mean baseline both rows' outcomes become +-.5: same after whitening
    assert torch.allclose(compute_advantages("reinforce++-baseline", inputs), out, atol=1e-6)


def test_value_loss_clipping_hand_values():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0, 0.0]])
    returns = torch.tensor([[1.0, -1.0, 7.0]])
    values = torch.tensor([[0.5, 0.1, 3.0]], requires_grad=True)
    loss, metrics = value_loss(values, old, returns, mask, clip_range=0.2)
    # token 0: unclipped (.5-1)^2=.25, clipped (.2-1)^2=.64 -> .64 (clipped wins)
    # token 1: unclipped (.1+1)^2=1.21, clipped (.1+1)^2=1.21 (inside the range) -> 1.21
    assert loss.item() == pytest.approx(0.5 * (0.64 + 1.21) / 2)
    assert metrics["value_clip_frac"] == pytest.approx(0.5)
    loss.backward()
    # the clipped term has no gradient through V at token 0; token 1: (V - R) / 2 tokens
    assert values.grad.tolist()[0] == pytest.approx([0.0, 0.55, 0.0])
    plain, _ = value_loss(values.detach(), old, returns, mask, clip_range=None)
    assert plain.item() == pytest.approx(0.5 * (0.25 + 1.21) / 2)

"""ReMax, OPO and GRPO pass@k: hand values, plain Python loops, and the inputs they read."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algorithms import ADVANTAGES, AdvantageInputs, compute_advantages, grpo_passk, opo, remax

MASK = torch.tensor(
    [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
)


def _inputs(rewards, groups, mask=MASK, **extra):
    return AdvantageInputs(
        rewards=torch.tensor(rewards, dtype=torch.float32),
        response_mask=mask,
        group_index=torch.tensor(groups),
        **extra,
    )


def _per_trajectory(advantages: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """The one value each row holds on its sampled tokens (checked constant), 0 elsewhere."""
    values = []
    for row, row_mask in zip(advantages, mask):
        sampled = row[row_mask.bool()]
        assert torch.all(sampled == sampled[0]) and torch.all(row[~row_mask.bool()] == 0)
        values.append(float(sampled[0]))
    return values


def test_opo_hand_values() -> None:
    # group 0: rows 0-2, lengths 3, 1, 2; group 1: rows 3-4, lengths 4, 2
    adv = opo(_inputs([1.0, 0.0, 1.0, 0.0, 1.0], [0, 0, 0, 1, 1]))
    b0 = (3 * 1.0 + 1 * 0.0 + 2 * 1.0) / 6
    b1 = (4 * 0.0 + 2 * 1.0) / 6
    assert _per_trajectory(adv, MASK) == pytest.approx([1 - b0, -b0, 1 - b0, -b1, 1 - b1])


def test_opo_with_equal_lengths_is_dr_grpo_and_singletons_get_zero() -> None:
    mask = torch.ones(4, 3)
    inputs = _inputs([0.0, 1.0, 1.0, 5.0], [7, 7, 7, 3], mask=mask)
    assert torch.allclose(opo(inputs)[:3], compute_advantages("grpo", inputs, normalize_by_std=False)[:3])
    assert torch.all(opo(inputs)[3] == 0)  # a group of one has no baseline (verl: A = r)


def _loop_opo(rewards, groups, lengths):
    out = []
    for r, g in zip(rewards, groups):
        members = [j for j in range(len(rewards)) if groups[j] == g]
        if len(members) == 1:
            out.append(0.0)
            continue
        baseline = sum(lengths[j] * rewards[j] for j in members) / sum(lengths[j] for j in members)
        out.append(r - baseline)
    return out


def _loop_passk(rewards, groups, normalize, epsilon=1e-6):
    out = [0.0] * len(rewards)
    for g in set(groups):
        members = [j for j in range(len(rewards)) if groups[j] == g]
        if len(members) < 2:
            continue
        ordered = sorted(members, key=lambda j: rewards[j], reverse=True)
        gap = rewards[ordered[0]] - rewards[ordered[1]]
        if normalize:
            values = [rewards[j] for j in members]
            mean = sum(values) / len(values)
            gap /= math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) + epsilon
        out[ordered[0]] = gap
    return out


@pytest.mark.parametrize("seed", range(4))
def test_opo_and_passk_match_loops(seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    B, T = 12, 6
    rewards = torch.randint(0, 4, (B,), generator=gen).float() / 3  # ties happen
    groups = torch.randint(0, 4, (B,), generator=gen)
    mask = (torch.rand(B, T, generator=gen) > 0.4).float()
    mask[:, 0] = 1.0
    inputs = AdvantageInputs(rewards=rewards, response_mask=mask, group_index=groups)
    r, g, lengths = rewards.tolist(), groups.tolist(), mask.sum(-1).tolist()
    assert _per_trajectory(opo(inputs), mask) == pytest.approx(_loop_opo(r, g, lengths), abs=1e-6)
    for normalize in (True, False):
        got = compute_advantages("grpo-passk", inputs, normalize_by_std=normalize)
        assert _per_trajectory(got, mask) == pytest.approx(_loop_passk(r, g, normalize), rel=1e-5, abs=1e-6)


def test_passk_hand_values() -> None:
    mask = torch.ones(7, 2)
    # group 0: best 1.0, next 0.5; group 1: the best (1.0) is shared; group 2: alone
    inputs = _inputs([0.5, 1.0, 0.0, 1.0, 1.0, 0.0, 3.0], [0, 0, 0, 1, 1, 1, 2], mask=mask)
    std0 = math.sqrt(((0.5 - 0.5) ** 2 + (1.0 - 0.5) ** 2 + (0.0 - 0.5) ** 2) / 2)
    assert _per_trajectory(grpo_passk(inputs), mask) == pytest.approx(
        [0.0, 0.5 / (std0 + 1e-6), 0.0, 0.0, 0.0, 0.0, 0.0]
    )
    assert _per_trajectory(grpo_passk(inputs, normalize_by_std=False), mask) == pytest.approx(
        [0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    )


def test_remax_subtracts_the_greedy_reward_from_the_return() -> None:
    inputs = _inputs(
        [1.0, 0.0, 1.0, 0.0, 1.0], [0, 0, 0, 1, 1], baseline_rewards=torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0])
    )
    assert _per_trajectory(remax(inputs), MASK) == pytest.approx([0.0, -1.0, 0.0, 0.0, 1.0])


def test_remax_reads_token_rewards_over_sampled_tokens() -> None:
    """Returns-to-go of the token rewards (a process reward mid-episode, the outcome last);
    the observation token between turns is no time step and gets 0."""
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0]])
    token_rewards = torch.tensor([[0.0, 0.25, 0.0, 0.0, 1.0]])
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.25]),
        response_mask=mask,
        group_index=torch.tensor([0]),
        token_rewards=token_rewards,
        baseline_rewards=torch.tensor([0.5]),
    )
    assert remax(inputs).tolist() == [[1.25 - 0.5, 1.25 - 0.5, 0.0, 1.0 - 0.5, 1.0 - 0.5]]


def test_remax_without_a_baseline_is_a_one_line_error() -> None:
    with pytest.raises(
        ValueError,
        match=r"^the remax estimator needs AdvantageInputs.baseline_rewards \(the reward of a greedy rollout of each task\)$",
    ):
        remax(_inputs([1.0, 0.0, 1.0, 0.0, 1.0], [0, 0, 0, 1, 1]))


def test_registered_with_their_parameters() -> None:
    assert ADVANTAGES["remax"] is remax and ADVANTAGES["opo"] is opo and ADVANTAGES["grpo-passk"] is grpo_passk
    assert ADVANTAGES.params("remax") == ADVANTAGES.params("opo") == ()
    assert ADVANTAGES.params("grpo-passk") == ("epsilon", "normalize_by_std")

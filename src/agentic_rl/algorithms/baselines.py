"""Outcome advantages with other baselines than GRPO's group mean: ReMax (a greedy
rollout's reward), OPO (the length-weighted group mean) and GRPO pass@k (only a group's
best sample is credited).

Shapes: ``B`` trajectories, ``T`` padded token positions. The reference is verl's
``core_algos.py`` (compute_remax_outcome_advantage, compute_opo_outcome_advantage,
compute_grpo_passk_outcome_advantage); as in this library's ``grpo`` and ``rloo``, a
group of one trajectory gets advantage 0 (verl: baseline 0 for OPO, an error for pass@k).
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algorithms.advantages import (
    AdvantageInputs,
    as_float,
    group_stats,
    outcome_token_rewards,
    register_advantage,
)
from agentic_rl.algorithms.reinforce import discounted_token_returns


def _group_sums(values: Tensor, group_index: Tensor) -> Tensor:
    """Sum of ``values`` [B] over each trajectory's group, on each trajectory -> [B]."""
    _, inverse = torch.unique(group_index, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, values)[inverse]


def _broadcast(per_trajectory: Tensor, response_mask: Tensor) -> Tensor:
    """[B] -> [B, T]: the value on every sampled token, 0 elsewhere."""
    return per_trajectory[:, None] * response_mask.to(per_trajectory.dtype)


@register_advantage("remax")
def remax(inputs: AdvantageInputs) -> Tensor:
    """ReMax (Li et al. 2023, arXiv 2310.10505) -> Tensor[B, T].

    A_t = G_t - b: G_t the return-to-go of the token rewards over sampled tokens (the
    outcome on the last one: G_t = r on every token), b = ``inputs.baseline_rewards``,
    the reward of a greedy (temperature 0) rollout of the trajectory's task. As verl's
    (its ``returns`` are a reverse cumulative sum, ours skip observation tokens).

    The RL trainer samples the greedy rollout beside each group (``TrajectoryGroup.baseline``)
    and scores it like the samples (training/scoring.py).
    """
    if inputs.baseline_rewards is None:
        raise ValueError(
            "the remax estimator needs AdvantageInputs.baseline_rewards (the reward of a greedy rollout of each task)"
        )
    returns = discounted_token_returns(outcome_token_rewards(inputs), inputs.response_mask, gamma=1.0)
    return returns - _broadcast(as_float(inputs.baseline_rewards).to(returns.dtype), inputs.response_mask)


@register_advantage("opo")
def opo(inputs: AdvantageInputs) -> Tensor:
    """OPO ("On-Policy RL with Optimal Reward Baseline", arXiv 2505.23585) -> Tensor[B, T].

    A_i = r_i - b_g with b_g = sum_j l_j r_j / sum_j l_j over the group, l_j the number
    of sampled tokens of trajectory j: the length-weighted mean reward, the
    variance-minimising baseline when the gradient norm grows with length. A group of
    size 1 gets 0.
    """
    rewards = as_float(inputs.rewards)
    lengths = inputs.response_mask.to(rewards.dtype).sum(-1)
    baseline = _group_sums(lengths * rewards, inputs.group_index) / _group_sums(lengths, inputs.group_index).clamp(
        min=1.0
    )
    _, _, sizes = group_stats(rewards, inputs.group_index)
    advantage = torch.where(sizes > 1, rewards - baseline, torch.zeros_like(rewards))
    return _broadcast(advantage, inputs.response_mask)


@register_advantage("grpo-passk")
def grpo_passk(inputs: AdvantageInputs, *, epsilon: float = 1e-6, normalize_by_std: bool = True) -> Tensor:
    """GRPO pass@k advantage (as verl's grpo_passk, arXiv 2503.19595) -> Tensor[B, T].

    Only the group's best trajectory is credited: A = r_max - r_second (the best reward
    minus the next one, 0 when the best is shared), divided by (std_g + epsilon) with the
    unbiased group std unless ``normalize_by_std`` is off; every other trajectory gets 0.
    This optimises the group's best outcome (pass@k) rather than the mean (pass@1).
    A group of size 1 gets 0.
    """
    rewards = as_float(inputs.rewards)
    _, std, sizes = group_stats(rewards, inputs.group_index)
    _, inverse = torch.unique(inputs.group_index, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    lowest = torch.full((num_groups,), float("-inf"), dtype=rewards.dtype, device=rewards.device)
    best = lowest.scatter_reduce(0, inverse, rewards, "amax")[inverse]
    is_best = rewards == best
    runner_up = lowest.scatter_reduce(
        0, inverse, torch.where(is_best, torch.full_like(rewards, float("-inf")), rewards), "amax"
    )[inverse]
    unique_best = is_best & (_group_sums(is_best.to(rewards.dtype), inputs.group_index) == 1) & (sizes > 1)
    # runner_up is -inf only where the best is shared or alone, which unique_best excludes.
    advantage = torch.where(unique_best, best - runner_up, torch.zeros_like(rewards))
    if normalize_by_std:
        advantage = advantage / (std + epsilon)
    return _broadcast(advantage, inputs.response_mask)

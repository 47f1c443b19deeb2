"""Advantage estimators: pure functions in one registry with one signature.

Every estimator is ``fn(inputs: AdvantageInputs, **params) -> Tensor[B, T]`` and is
looked up by name through :func:`compute_advantages`, so the trainer never branches on
the estimator. Estimators that need more than outcome rewards (PPO's GAE, REINFORCE++)
read the optional fields of :class:`AdvantageInputs`.

Shapes: ``B`` trajectories, ``T`` padded token positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agentic_rl.algorithms.registry import Registry


@dataclass
class AdvantageInputs:
    """Everything an estimator may read; estimators ignore what they do not need."""

    rewards: Tensor
    """[B] scalar outcome reward per trajectory."""
    response_mask: Tensor
    """[B, T] float/bool, 1 where the policy sampled the token (the loss_mask)."""
    group_index: Tensor
    """[B] long; trajectories of the same task share an index (any integer labels)."""
    token_rewards: Tensor | None = None
    """[B, T] per-token rewards at sampled positions (token-level estimators: GAE,
    REINFORCE++); default: the outcome ``rewards`` on each row's last sampled token."""
    values: Tensor | None = None
    """[B, T] critic values V(s_t) at sampled positions (for PPO / GAE)."""
    turn_index: Tensor | None = None
    """[B, T] long: the assistant turn (0, 1, ...) each sampled token belongs to, -1 elsewhere."""
    turn_rewards: Tensor | None = None
    """[B, K] per-turn process rewards (``info["turn_reward"]``, outcome excluded), 0 past the last turn."""
    turn_mask: Tensor | None = None
    """[B, K] 1 where turn k exists."""
    anchor_index: Tensor | None = None
    """[B, K] long: equal labels = the same anchor state (identical observation before the
    turn, same task group); GiGPO's step groups."""
    first_tool_turn: Tensor | None = None
    """[B] long: first turn whose tool results came back (MT-GRPO's boundary), -1 if none."""
    baseline_rewards: Tensor | None = None
    """[B] reward of a baseline rollout of each trajectory's task, equal within a group
    (ReMax: the greedy rollout's); the trainer does not fill it yet."""


AdvantageFn = Callable[..., Tensor]
ADVANTAGES = Registry("advantage estimator", inputs=1)
"""Name -> ``fn(inputs: AdvantageInputs, **params) -> Tensor[B, T]``."""


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator adding ``fn(inputs, **params) -> Tensor[B, T]`` to :data:`ADVANTAGES`."""
    return ADVANTAGES.register(name)


def compute_advantages(name: str, inputs: AdvantageInputs, **params) -> Tensor:
    """Run the estimator ``name`` -> Tensor[B, T].

    A parameter the estimator does not take is a TypeError naming it (pass each estimator
    only its own: ``ADVANTAGES.params_for(name, knobs)`` or ``AlgorithmConfig.advantage_params()``).
    """
    return ADVANTAGES.call(name, inputs, **params)


def as_float(values: Tensor) -> Tensor:
    """``values`` as a floating-point tensor (unchanged when it already is one)."""
    return values if values.is_floating_point() else values.float()


def group_stats(rewards: Tensor, group_index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-trajectory statistics of its group: (mean[B], std[B], group_sizes[B]).

    ``std`` is the unbiased (n - 1) standard deviation, as ``torch.std``; it is 0 for a
    group of size 1 (where torch.std would give nan). A group whose rewards are all equal
    gets exactly that reward as its mean and exactly 0 as its std: summed in float32, eight
    rewards of 0.6 average to 0.59999994, and (r - mean) / (std + eps) would hand such a
    group an advantage of 0.056 on every token where it has none.
    """
    rewards = as_float(rewards)
    _, inverse = torch.unique(group_index, return_inverse=True)
    num_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    sizes = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).index_add_(
        0, inverse, torch.ones_like(rewards)
    )
    sums = torch.zeros_like(sizes).index_add_(0, inverse, rewards)
    highest = torch.full_like(sizes, float("-inf")).scatter_reduce(0, inverse, rewards, "amax")
    lowest = torch.full_like(sizes, float("inf")).scatter_reduce(0, inverse, rewards, "amin")
    flat = (highest == lowest)[inverse]
    mean = torch.where(flat, rewards, (sums / sizes)[inverse])
    squares = torch.zeros_like(sizes).index_add_(0, inverse, (rewards - mean) ** 2)
    std = (squares / (sizes - 1).clamp(min=1)).sqrt()[inverse]
    return mean, std, sizes[inverse]


def zero_std_group_fraction(rewards: Tensor, group_index: Tensor) -> float:
    """Fraction of groups whose rewards are all equal (they carry no GRPO signal).

    A group of size 1 counts as all-equal.
    """
    rewards = as_float(rewards)
    _, inverse = torch.unique(group_index, return_inverse=True)
    if inverse.numel() == 0:
        return 0.0
    num_groups = int(inverse.max()) + 1
    highest = torch.full((num_groups,), float("-inf"), dtype=rewards.dtype, device=rewards.device).scatter_reduce(
        0, inverse, rewards, "amax"
    )
    lowest = torch.full((num_groups,), float("inf"), dtype=rewards.dtype, device=rewards.device).scatter_reduce(
        0, inverse, rewards, "amin"
    )
    return float((highest == lowest).float().mean())


def outcome_token_rewards(inputs: AdvantageInputs) -> Tensor:
    """``inputs.token_rewards``, or the outcome reward on each row's last sampled token -> [B, T]."""
    if inputs.token_rewards is not None:
        return as_float(inputs.token_rewards)
    mask = inputs.response_mask.to(torch.bool)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(1)
    out = torch.zeros(mask.shape, dtype=as_float(inputs.rewards).dtype, device=mask.device)
    rows = torch.nonzero(last >= 0).squeeze(1)
    out[rows, last[rows]] = as_float(inputs.rewards)[rows]
    return out


def _broadcast(per_trajectory: Tensor, response_mask: Tensor) -> Tensor:
    """[B] -> [B, T]: the trajectory's advantage on every sampled token, 0 elsewhere."""
    return per_trajectory[:, None] * response_mask.to(per_trajectory.dtype)


@register_advantage("grpo")
def grpo(inputs: AdvantageInputs, *, epsilon: float = 1e-6, normalize_by_std: bool = True) -> Tensor:
    """GRPO outcome advantage -> Tensor[B, T].

    A_b = (r_b - mean_g) / (std_g + epsilon) with the unbiased group std (as verl and
    TRL); ``normalize_by_std=False`` gives A_b = r_b - mean_g (Dr. GRPO). A group of
    size 1 has no baseline and gets advantage 0.
    """
    advantage = group_normalized(inputs.rewards, inputs.group_index, epsilon=epsilon, normalize_by_std=normalize_by_std)
    return _broadcast(advantage, inputs.response_mask)


def group_normalized(
    values: Tensor, group_index: Tensor, *, epsilon: float = 1e-6, normalize_by_std: bool = True
) -> Tensor:
    """(v - mean_g) / (std_g + epsilon) within the groups of ``group_index`` -> [N] (values
    and labels [N]); without std normalization v - mean_g; 0 for a group of size 1."""
    values = as_float(values)
    mean, std, sizes = group_stats(values, group_index)
    advantage = values - mean
    if normalize_by_std:
        advantage = advantage / (std + epsilon)
    return torch.where(sizes > 1, advantage, torch.zeros_like(advantage))


@register_advantage("rloo")
def rloo(inputs: AdvantageInputs) -> Tensor:
    """REINFORCE leave-one-out -> Tensor[B, T].

    A_i = r_i - mean_{j != i in group} r_j; a group of size 1 gets advantage 0.
    """
    rewards = as_float(inputs.rewards)
    mean, _, sizes = group_stats(rewards, inputs.group_index)
    # r_i - (n mean - r_i) / (n - 1) = n / (n - 1) (r_i - mean): exactly 0 for an all-equal group.
    advantage = torch.where(sizes > 1, (rewards - mean) * sizes / (sizes - 1).clamp(min=1), torch.zeros_like(rewards))
    return _broadcast(advantage, inputs.response_mask)

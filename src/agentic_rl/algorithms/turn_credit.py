"""Turn-level credit assignment for multi-turn episodes: per-turn discounted returns,
MT-GRPO and GiGPO.

Per-turn rewards come from the env's ``info["turn_reward"]`` (a process reward for that
turn, e.g. a tool call that ran); the outcome reward belongs to the last turn.

Shapes: ``B`` trajectories, ``T`` padded token positions, ``K`` padded turns.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algorithms.advantages import AdvantageInputs, as_float, group_normalized, register_advantage
from agentic_rl.algorithms.params import NonNegative, UnitInterval


def _require(inputs: AdvantageInputs, name: str, *fields: str) -> None:
    missing = [field for field in fields if getattr(inputs, field) is None]
    if missing:
        raise ValueError(f"the {name} estimator needs AdvantageInputs.{', '.join(missing)} (turn data)")


def step_rewards(rewards: Tensor, turn_rewards: Tensor, turn_mask: Tensor) -> Tensor:
    """Per-turn rewards with the outcome added on each row's last turn -> [B, K].

    ``rewards`` [B] outcome; ``turn_rewards``, ``turn_mask`` [B, K]; 0 past the last turn."""
    mask = turn_mask.to(torch.bool)
    last = mask.sum(1) - 1
    outcome = torch.zeros_like(as_float(turn_rewards))
    rows = torch.nonzero(last >= 0).squeeze(1)
    outcome[rows, last[rows]] = as_float(rewards)[rows]
    return torch.where(mask, as_float(turn_rewards) + outcome, torch.zeros_like(outcome))


def discounted_turn_returns(step_reward: Tensor, turn_mask: Tensor, *, gamma: float = 1.0) -> Tensor:
    """R_k = sum_{j >= k} gamma^(j - k) r_j over the turns of each row -> [B, K] (0 past the last turn)."""
    mask = turn_mask.to(torch.bool)
    rewards = torch.where(mask, as_float(step_reward), torch.zeros_like(as_float(step_reward)))
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for k in range(rewards.shape[1] - 1, -1, -1):
        running = rewards[:, k] + gamma * running
        returns[:, k] = torch.where(mask[:, k], running, torch.zeros_like(running))
    return returns


def _per_turn_to_tokens(per_turn: Tensor, turn_index: Tensor, response_mask: Tensor) -> Tensor:
    """[B, K] values -> [B, T]: each sampled token gets its turn's value, 0 elsewhere."""
    sampled = response_mask.to(torch.bool) & (turn_index >= 0)
    gathered = per_turn.gather(1, turn_index.clamp(min=0).long())
    return torch.where(sampled, gathered, torch.zeros_like(gathered))


@register_advantage("mt-grpo")
def mt_grpo(inputs: AdvantageInputs, *, epsilon: float = 1e-6, normalize_by_std: bool = True) -> Tensor:
    """MT-GRPO (Zeng et al., 2025) -> [B, T].

    A^O: the GRPO advantage of the outcome reward. A^T: the GRPO advantage of the turn-level
    reward R^T = sum of ``turn_rewards`` up to and including the first turn whose tool
    results came back (``first_tool_turn``; without a tool result, every turn). Tokens of
    those turns (before the first tool result is seen) get A^T + A^O, later tokens A^O.
    """
    _require(inputs, "mt-grpo", "turn_index", "turn_rewards", "turn_mask", "first_tool_turn")
    mask = inputs.turn_mask.to(torch.bool)
    last = mask.sum(1) - 1
    boundary = torch.where(inputs.first_tool_turn >= 0, inputs.first_tool_turn, last)
    turns = torch.arange(mask.shape[1], device=mask.device)[None, :]
    before = mask & (turns <= boundary[:, None])
    turn_level = torch.where(
        before, as_float(inputs.turn_rewards), torch.zeros_like(as_float(inputs.turn_rewards))
    ).sum(1)
    outcome_advantage = group_normalized(
        inputs.rewards, inputs.group_index, epsilon=epsilon, normalize_by_std=normalize_by_std
    )
    turn_advantage = group_normalized(
        turn_level, inputs.group_index, epsilon=epsilon, normalize_by_std=normalize_by_std
    )
    per_turn = outcome_advantage[:, None] + turn_advantage[:, None] * before.to(outcome_advantage.dtype)
    return _per_turn_to_tokens(per_turn, inputs.turn_index, inputs.response_mask)


@register_advantage("gigpo")
def gigpo(
    inputs: AdvantageInputs,
    *,
    gamma: UnitInterval = 0.95,
    step_advantage_weight: NonNegative = 1.0,
    epsilon: float = 1e-6,
    normalize_by_std: bool = True,
) -> Tensor:
    """GiGPO (Feng et al., 2025) -> [B, T].

    A^E: the GRPO advantage of the episode reward (outcome). A^S: within each anchor-state
    group (turns with the same ``anchor_index`` label: identical observation in the same
    task group), the group-normalized discounted step return R_k of
    :func:`discounted_turn_returns` over :func:`step_rewards`; an anchor group of one turn
    gets A^S = 0. Tokens of turn k get A^E + step_advantage_weight * A^S_k.
    """
    _require(inputs, "gigpo", "turn_index", "turn_rewards", "turn_mask", "anchor_index")
    mask = inputs.turn_mask.to(torch.bool)
    returns = discounted_turn_returns(step_rewards(inputs.rewards, inputs.turn_rewards, mask), mask, gamma=gamma)
    step_advantage = torch.zeros_like(returns)
    step_advantage[mask] = group_normalized(
        returns[mask], inputs.anchor_index[mask], epsilon=epsilon, normalize_by_std=normalize_by_std
    )
    episode_advantage = group_normalized(
        inputs.rewards, inputs.group_index, epsilon=epsilon, normalize_by_std=normalize_by_std
    )
    per_turn = episode_advantage[:, None] + step_advantage_weight * step_advantage
    return _per_turn_to_tokens(per_turn, inputs.turn_index, inputs.response_mask)

"""From trajectories to the tensors of ``AdvantageInputs``: token rewards, turn boundaries,
per-turn rewards and anchor states. Estimators read what they need and ignore the rest.

Shapes: ``B`` trajectories, ``T`` padded token positions, ``K`` padded turns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from agentic_rl.algorithms import AdvantageInputs
from agentic_rl.envs.terms import weighted
from agentic_rl.types import Trajectory, Turn


def turn_process_reward(turn: Turn, tool_turn_reward: float, term_weights: Mapping[str, float] | None = None) -> float:
    """The env's ``info["turn_reward"]``, plus ``tool_turn_reward`` when the turn called
    tools and every call ran (MT-GRPO's tool-execution reward), plus the turn's terms
    (``info["turn_terms"]``) times ``term_weights`` (``reward.terms``)."""
    ran = bool(turn.tool_results) and all(r.ok and not r.malformed for r in turn.tool_results)
    terms = weighted(turn.turn_terms, term_weights) if term_weights else 0.0
    return turn.turn_reward + (tool_turn_reward if ran else 0.0) + terms


def _last_sampled(loss_mask: Sequence[int], start: int, end: int) -> int | None:
    for position in range(min(end, len(loss_mask)) - 1, start - 1, -1):
        if loss_mask[position]:
            return position
    return None


def _anchor_tokens(trajectory: Trajectory, k: int) -> tuple[int, ...]:
    """The observation the agent saw right before turn k: the prompt for turn 0, else the
    observation tokens written after turn k - 1."""
    if k == 0:
        return tuple(trajectory.token_ids[: trajectory.prompt_length])
    previous = trajectory.turns[k - 1]
    return tuple(trajectory.token_ids[previous.response_end : previous.observation_end])


def build_advantage_inputs(
    trajectories: Sequence[Trajectory],
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    *,
    tool_turn_reward: float = 0.0,
    term_weights: Mapping[str, float] | None = None,
    token_kl: Sequence[Sequence[float]] | None = None,
    kl_coef: float = 0.0,
    token_values: Sequence[Sequence[float]] | None = None,
    baseline_rewards: torch.Tensor | None = None,
) -> AdvantageInputs:
    """``AdvantageInputs`` for ``trajectories`` with ``rewards`` [B] (outcome + shaping) and
    ``group_index`` [B]; ``tool_turn_reward`` and ``term_weights``: the per-turn shaping
    of :func:`turn_process_reward`.

    token_rewards [B, T]: each turn's process reward on its last sampled token, the outcome
    on the last sampled token of the episode and, with ``token_kl`` rows, -kl_coef * KL on
    every sampled token (KL in the reward). With KL in the reward the sequence ``rewards``
    seen by outcome estimators are lowered by the same total. ``token_values`` rows give
    ``values`` [B, T]. ``baseline_rewards`` [B]: each row's baseline reward (ReMax's
    greedy rollout of its task), passed through. Anchor states are labelled per task group
    by the exact observation tokens before the turn.
    """
    width = max(len(t.token_ids) for t in trajectories)
    num_turns = max(1, max(len(t.turns) for t in trajectories))
    batch = len(trajectories)
    response_mask = torch.zeros((batch, width))
    token_rewards = torch.zeros((batch, width))
    turn_index = torch.full((batch, width), -1, dtype=torch.long)
    turn_rewards = torch.zeros((batch, num_turns))
    turn_mask = torch.zeros((batch, num_turns))
    anchor_index = torch.full((batch, num_turns), -1, dtype=torch.long)
    first_tool_turn = torch.full((batch,), -1, dtype=torch.long)
    values = torch.zeros((batch, width)) if token_values is not None else None
    anchors: dict[tuple, int] = {}
    rewards = rewards.clone().float()
    for row, trajectory in enumerate(trajectories):
        mask = trajectory.loss_mask
        response_mask[row, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        for k, turn in enumerate(trajectory.turns):
            end = max(turn.response_end, turn.observation_end)
            turn_index[row, turn.response_start : end] = k
            turn_mask[row, k] = 1.0
            turn_rewards[row, k] = turn_process_reward(turn, tool_turn_reward, term_weights)
            anchor_key = (int(group_index[row]), _anchor_tokens(trajectory, k))
            anchor_index[row, k] = anchors.setdefault(anchor_key, len(anchors))
            if turn.tool_results and first_tool_turn[row] < 0:
                first_tool_turn[row] = k
            last = _last_sampled(mask, turn.response_start, turn.response_end)
            if last is not None:
                token_rewards[row, last] += turn_rewards[row, k]
        last = _last_sampled(mask, 0, len(mask))
        if last is not None:
            token_rewards[row, last] += float(rewards[row])
        if token_kl is not None:
            kl = torch.tensor(token_kl[row], dtype=torch.float32) * response_mask[row, : len(token_kl[row])]
            token_rewards[row, : len(kl)] -= kl_coef * kl
            rewards[row] -= kl_coef * float(kl.sum())
        if values is not None:
            values[row, : len(token_values[row])] = torch.tensor(token_values[row], dtype=torch.float32)
    return AdvantageInputs(
        rewards=rewards,
        response_mask=response_mask,
        group_index=group_index,
        token_rewards=token_rewards,
        values=values,
        turn_index=turn_index,
        turn_rewards=turn_rewards,
        turn_mask=turn_mask,
        anchor_index=anchor_index,
        first_tool_turn=first_tool_turn,
        baseline_rewards=baseline_rewards,
    )

"""Scoring a step's groups: outcome rewards plus shaping, advantages per token, and the
group filter that decides which groups enter the update. Pure functions of the
trajectories and the ``algorithm`` section (plus the few scalars named in each)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from agentic_rl.algorithms import compute_advantages, filter_groups, gae, overlong_penalty, zero_std_group_fraction
from agentic_rl.algorithms.arpo import hard_attribution
from agentic_rl.config import AlgorithmConfig, RewardConfig
from agentic_rl.envs.terms import weighted
from agentic_rl.rewards.episode import format_ok, retrieval_calls, tool_cost, two_stage_reward
from agentic_rl.rollout.arpo import branch_common_prefix
from agentic_rl.rollout.roles import task_key
from agentic_rl.training.credit import build_advantage_inputs
from agentic_rl.types import Trajectory, TrajectoryGroup

EPISODE_LEVEL_ADVANTAGES = ("grpo", "rloo", "opo", "grpo-passk")
"""Estimators whose advantage is one number per episode: the ones that work when episodes
have several samples (``Trajectory.segments``; each sample gets its episode's)."""


@dataclass
class ScoredBatch:
    """The trajectories that enter the loss, with one reward and one advantage row each."""

    trajectories: list[Trajectory]
    rewards: torch.Tensor  # [N] outcome reward + shaping
    advantages: list[list[float]] = field(default_factory=list)  # per token, aligned with token_ids
    excluded: int = 0  # infrastructure failures kept out of the loss
    frac_zero_std_groups: float = 0.0
    returns: list[list[float]] | None = None  # critic targets per token (with a critic)
    old_values: list[list[float]] | None = None  # critic values at sampling time (with a critic)
    role_weights: dict[str, float] = field(default_factory=dict)  # algorithm.role_weights as applied


def usable_trajectories(groups: list[TrajectoryGroup]) -> list[Trajectory]:
    """Trajectories whose env and tools did not crash (``infra_error`` ones leave the batch:
    the policy did not cause them, so they must not be scored)."""
    return [t for g in groups for t in g.trajectories if t.infra_error is None]


def episode_rewards(trajectories: list[Trajectory], reward: RewardConfig | None, *, step: int = 0) -> torch.Tensor:
    """The env's outcome rewards [N] with the ``reward`` section's terms: the two-stage
    schedule (at RL step ``step``) in place of the outcome, plus ``format_weight`` for a
    followed format, minus the tool calls' costs, plus the env's episode terms times
    ``reward.terms``."""
    values = []
    for trajectory in trajectories:
        value = trajectory.reward
        if reward is not None:
            formatted = format_ok(trajectory)
            stages = reward.two_stage
            if stages.switch_step is not None:
                value = two_stage_reward(
                    value,
                    step=step,
                    switch_step=stages.switch_step,
                    formatted=formatted,
                    retrieved=retrieval_calls(trajectory, stages.retrieval_tool) > 0,
                    retrieval_reward=stages.retrieval_reward,
                    format_reward=stages.format_reward,
                    format_penalty=stages.format_penalty,
                )
            value += reward.format_weight * float(formatted) - tool_cost(trajectory, reward.tool_costs)
            # Every segment's turns: a context policy may have cut the episode before a term's step.
            value += sum(weighted(turn.reward_terms, reward.terms) for s in trajectory.samples for turn in s.turns)
        values.append(value)
    return torch.tensor(values, dtype=torch.float32)


def shaped_rewards(
    trajectories: list[Trajectory],
    *,
    max_total_tokens: int,
    reward: RewardConfig | None = None,
    step: int = 0,
) -> torch.Tensor:
    """Episode rewards [N] (:func:`episode_rewards`: the outcome with the ``reward`` section's
    terms at RL step ``step``) plus DAPO's soft overlong punishment when configured
    (``max_total_tokens``: the rollout's token limit)."""
    rewards = episode_rewards(trajectories, reward, step=step)
    if reward is not None and reward.overlong_buffer and trajectories:
        # Length after the prompt against the room the token limit leaves: penalises
        # episodes that run into truncation (DAPO's soft overlong punishment).
        lengths = torch.tensor([len(t.token_ids) - t.prompt_length for t in trajectories])
        # A prompt that alone fills the limit leaves no room (the episode ended before sampling).
        room = max(max_total_tokens - min(t.prompt_length for t in trajectories), 0)
        rewards = rewards + overlong_penalty(lengths, room, min(reward.overlong_buffer, room))
    return rewards


def score(
    groups: list[TrajectoryGroup],
    algorithm: AlgorithmConfig,
    *,
    max_total_tokens: int,
    attribution: str = "soft",
    rewards: torch.Tensor | None = None,
    token_values: list[list[float]] | None = None,
    token_kl: list[list[float]] | None = None,
    reward: RewardConfig | None = None,
    step: int = 0,
) -> ScoredBatch:
    """Rewards (with soft overlong punishment) and advantages for the usable trajectories.

    ``max_total_tokens`` is the rollout's token limit (overlong shaping); ``attribution``
    is ARPO's ("hard": one advantage over a shared branch prefix). ``rewards`` are the
    shaped rewards of :func:`usable_trajectories` when the caller has them already (else
    computed here with the ``reward`` section at RL step ``step``).
    ``token_values`` (critic values) and ``token_kl`` (per-token KL to the reference, put
    into the reward when ``algorithm.kl.in_reward``) are rows aligned with
    :func:`usable_trajectories`. With values, the critic's targets (GAE returns) and the
    old values come back too.
    """
    usable = usable_trajectories(groups)
    excluded = sum(len(g.trajectories) for g in groups) - len(usable)
    if not usable:
        return ScoredBatch([], torch.zeros(0), excluded=excluded)
    if rewards is None:
        rewards = shaped_rewards(usable, max_total_tokens=max_total_tokens, reward=reward, step=step)
    group_of = {g.group_id: i for i, g in enumerate(groups)}
    group_index = torch.tensor([group_of[t.group_id] for t in usable])
    if any(t.segments for t in usable):
        return _score_with_segments(usable, rewards, group_index, algorithm, excluded=excluded)
    inputs = build_advantage_inputs(
        usable,
        rewards,
        group_index,
        tool_turn_reward=reward.tool_turn_reward if reward is not None else 0.0,
        term_weights=reward.terms if reward is not None else None,
        token_kl=token_kl if algorithm.kl.in_reward else None,
        kl_coef=algorithm.kl.coef,
        token_values=token_values,
        baseline_rewards=baseline_rewards(groups, usable, algorithm, max_total_tokens, reward, step)
        if algorithm.advantage.name == "remax"
        else None,
    )
    advantages = compute_advantages(algorithm.advantage.name, inputs, **algorithm.advantage.params)
    if attribution == "hard" and (shared := branch_common_prefix(usable)) is not None:
        advantages = hard_attribution(advantages, shared)
    rows = [advantages[row, : len(t.token_ids)].tolist() for row, t in enumerate(usable)]
    scored = ScoredBatch(usable, rewards, rows, excluded, zero_std_group_fraction(rewards, group_index))
    if inputs.values is not None:
        _, returns = gae(inputs.token_rewards, inputs.values, inputs.response_mask, **algorithm.return_params())
        scored.returns = [returns[row, : len(t.token_ids)].tolist() for row, t in enumerate(usable)]
        scored.old_values = [list(values) for values in token_values]
    return weigh_roles(scored, algorithm)


def role_weights(trajectories: list[Trajectory], setting: dict[str, float] | str, aggregation: str) -> dict[str, float]:
    """``algorithm.role_weights`` for this batch: each role present -> its weight. A dict
    names weights (1 for roles it leaves out); ``balanced`` weighs a role by the roles' mean
    count of what ``aggregation`` averages over (sampled tokens; sequences for
    seq-mean-token-mean) over its own, so every role's total counts the same and the sum is
    unchanged. Samples without a role keep weight 1."""
    counts: dict[str, int] = {}
    for t in trajectories:
        role = t.info.get("role")
        if role is not None:
            counts[role] = counts.get(role, 0) + (1 if aggregation == "seq-mean-token-mean" else sum(t.loss_mask))
    if setting != "balanced":
        return {role: float(setting.get(role, 1.0)) for role in counts}
    present = [count for count in counts.values() if count]
    mean = sum(present) / max(len(present), 1)
    return {role: mean / count if count else 1.0 for role, count in counts.items()}


def weigh_roles(scored: ScoredBatch, algorithm: AlgorithmConfig) -> ScoredBatch:
    """``scored`` with each role's advantages scaled by its ``algorithm.role_weights``
    weight (a policy loss linear in the advantage: the role's share of the loss)."""
    if not algorithm.role_weights:
        return scored
    weights = role_weights(scored.trajectories, algorithm.role_weights, algorithm.aggregation)
    scored.role_weights = weights
    scored.advantages = [
        [value * weights.get(t.info.get("role"), 1.0) for value in row]
        for t, row in zip(scored.trajectories, scored.advantages, strict=True)
    ]
    return scored


def baseline_rewards(
    groups: list[TrajectoryGroup],
    usable: list[Trajectory],
    algorithm: AlgorithmConfig,
    max_total_tokens: int,
    reward: RewardConfig | None,
    step: int,
) -> torch.Tensor:
    """[B]: the shaped reward of each usable row's group baseline (ReMax's greedy rollout),
    scored exactly as the samples are (the same shaping terms)."""
    baseline_of = {g.group_id: g.baseline for g in groups}
    missing = sorted({t.group_id for t in usable if baseline_of.get(t.group_id) is None})
    if missing:
        raise ValueError(
            f"algorithm.advantage.name: remax needs a greedy baseline rollout per group; group {missing[0]} has none"
        )
    baselines = [baseline_of[t.group_id] for t in usable]
    return shaped_rewards(baselines, max_total_tokens=max_total_tokens, reward=reward, step=step)


def _score_with_segments(
    usable: list[Trajectory],
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    algorithm: AlgorithmConfig,
    *,
    excluded: int,
) -> ScoredBatch:
    """Advantages when episodes have several samples (``Trajectory.segments``): the
    estimator sees one member per episode (its last sample with sampled tokens), so
    an episode counts once in its group's statistics whatever its segment count; every
    sample of the episode gets the episode's advantage on its sampled tokens."""
    if (
        algorithm.advantage.name not in EPISODE_LEVEL_ADVANTAGES
        or algorithm.kl.in_reward
        or algorithm.critic.kind != "none"
    ):
        raise ValueError(
            f"algorithm.advantage.name: episodes with several samples need one advantage per episode ({', '.join(EPISODE_LEVEL_ADVANTAGES)}; "
            f"no critic, no KL in the reward), got {algorithm.advantage.name}"
        )
    # The advantage is read on a sampled token: the last sample that has one stands for the
    # episode (a last segment may sample nothing, when its new prompt filled the budget).
    members = [next((s for s in reversed(episode.samples) if any(s.loss_mask)), episode) for episode in usable]
    inputs = build_advantage_inputs(members, rewards, group_index)
    advantages = compute_advantages(algorithm.advantage.name, inputs, **algorithm.advantage.params)
    samples, rows, sample_rewards = [], [], []
    for row, episode in enumerate(usable):
        sampled = inputs.response_mask[row].nonzero()
        value = float(advantages[row, sampled[0, 0]]) if len(sampled) else 0.0
        for sample in episode.samples:
            samples.append(sample)
            rows.append([value * mask for mask in sample.loss_mask])
            sample_rewards.append(float(rewards[row]))
    scored = ScoredBatch(
        samples, torch.tensor(sample_rewards), rows, excluded, zero_std_group_fraction(rewards, group_index)
    )
    return weigh_roles(scored, algorithm)


def first_tasks(groups: list[TrajectoryGroup], count: int) -> tuple[list[TrajectoryGroup], int]:
    """(the groups of the first ``count`` tasks among ``groups``, how many tasks they are):
    ``rl.tasks_per_step`` counts tasks, and a task with R roles has R groups, kept or cut together."""
    tasks = list(dict.fromkeys(map(task_key, groups)))[:count]
    chosen = set(tasks)
    return [g for g in groups if task_key(g) in chosen], len(tasks)


def keep_groups(groups: list[TrajectoryGroup], algorithm: AlgorithmConfig) -> list[TrajectoryGroup]:
    """The groups ``algorithm.group_filter.name`` lets into the update, judged on the outcome
    rewards of their usable trajectories (as DAPO filters on accuracy, before shaping)."""
    if algorithm.group_filter.name == "none":
        return groups
    members = [(i, t.reward) for i, g in enumerate(groups) for t in g.trajectories if t.infra_error is None]
    if not members:
        return []
    labels = torch.tensor([i for i, _ in members])
    keep = filter_groups(
        algorithm.group_filter.name,
        torch.tensor([r for _, r in members], dtype=torch.float32),
        labels,
        **algorithm.group_filter.params,
    )
    kept = set(labels[keep].tolist())
    return [g for i, g in enumerate(groups) if i in kept]

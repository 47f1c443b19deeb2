"""ARPO's entropy-based adaptive rollout (Dong et al. 2025, "Agentic Reinforced Policy
Optimization").

Per task, out of a budget of M trajectories (the trainer's ``group_size``):

1. sample N global trajectories (the usual batched engine, recording per-token entropies);
2. at every tool-call point of a finished trajectory (the end of a tool observation that
   the policy answered with another turn), compare the normalized entropy of the first k
   tokens of that next turn with the episode's initial entropy (first k tokens of its
   first turn) and branch with probability P = alpha + beta * dH
   (:func:`agentic_rl.algorithms.arpo.branch_probability`): Z branches restart from the
   end of the observation and sample the rest of the episode anew;
3. branches are new trajectories whose own tool-call points are examined in the next
   round (up to ``max_rounds`` rounds), until the budget is spent;
4. whatever budget branching left is filled with global samples.

The decision at a point depends only on the prefix up to the first k tokens after it,
so taking it after a round finishes gives the same distribution as deciding mid-episode,
and the engine only needs one entry point to continue partial trajectories. The env
state at a branch point is rebuilt by replay: a fresh env, reset with the same task,
steps the prefix's assistant messages; when a replayed observation or reward differs
from the recorded one (a nondeterministic tool), the branch is skipped and counted.

Each trajectory's ``info["arpo"]`` records its id, task index, the turn it branched
after, the round, and its lineage (ancestor ids with the number of tokens shared with
each), which hard advantage attribution and the metrics use.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from agentic_rl.algorithms.arpo import branch_probability, common_prefix_lengths, normalized_entropy
from agentic_rl.config import ARPOConfig, RolloutConfig
from agentic_rl.envs.base import Env
from agentic_rl.rollout.engine import continue_rollouts, rollout
from agentic_rl.seeds import derive_seed
from agentic_rl.types import Trajectory, TrajectoryGroup

INFO_KEY = "arpo"


@dataclass
class ARPOStats:
    """What one ARPO rollout did (summed over its tasks)."""

    tasks: int = 0
    rounds: int = 0
    """Generation rounds: the global samples, each branching round, and the fill."""
    branch_points: int = 0
    """Tool-call points examined (with a measurable entropy)."""
    branches: int = 0
    """Branch trajectories sampled."""
    replay_mismatches: int = 0
    """Branches skipped because replaying the prefix gave a different observation or reward."""
    filled: int = 0
    """Global samples added after branching to fill the budget."""
    tool_calls: int = 0
    """Tool calls the policy made, a shared prefix's calls counted once."""

    @classmethod
    def total(cls, parts: list[ARPOStats]) -> ARPOStats:
        """The statistics of ``parts`` run side by side (e.g. on every rank): counts add up,
        rounds are the most any part ran."""
        total = cls(**{f.name: sum(getattr(part, f.name) for part in parts) for f in dataclasses.fields(cls)})
        total.rounds = max((part.rounds for part in parts), default=0)
        return total

    def metrics(self) -> dict[str, float]:
        tasks = max(self.tasks, 1)
        return {
            "arpo/rounds": float(self.rounds),
            "arpo/branch_points_per_task": self.branch_points / tasks,
            "arpo/branches_per_task": self.branches / tasks,
            "arpo/fill_per_task": self.filled / tasks,
            "arpo/replay_mismatches": float(self.replay_mismatches),
            "arpo/tool_calls_per_task": self.tool_calls / tasks,
        }


def arpo_rollout(
    backend,
    make_env: Callable[[], Env],
    task_indices: Sequence[int],
    *,
    budget: int,
    params: ARPOConfig | None = None,
    config: RolloutConfig | None = None,
    seed: int | None = None,
    on_finish: Callable[[Trajectory], None] | None = None,
    training_step: int | None = None,
) -> tuple[list[TrajectoryGroup], ARPOStats]:
    """One group of exactly ``budget`` trajectories per task (fewer only when an env's
    reset failed), global samples first, then branches and fill-ins. ``seed`` seeds the
    branching draws and (per round) the sampling."""
    params = params or ARPOConfig()
    if backend.interface != "tokens":
        raise ValueError("ARPO needs a token backend (per-token entropies and token prefixes)")
    if not 1 <= params.initial_samples <= budget:
        raise ValueError(f"initial_samples must be between 1 and the budget ({budget}), got {params.initial_samples}")
    sample = dict(config=config, return_entropy=True, on_finish=on_finish)
    vocab_size = len(backend.tokenizer)
    rng = random.Random(seed)
    stats = ARPOStats(tasks=len(task_indices), rounds=1)

    groups = rollout(
        backend,
        make_env,
        task_indices,
        group_size=params.initial_samples,
        seed=seed,
        training_step=training_step,
        **sample,
    )
    _tag_global_samples(groups, task_indices, training_step)
    # (group position, trajectory, first turn whose tool-call point is not examined yet)
    frontier = [(position, t, 0) for position, g in enumerate(groups) for t in g.trajectories]
    for round_number in range(1, params.max_rounds + 1):
        starts, placed = _choose_branches(
            groups,
            frontier,
            make_env,
            budget=budget,
            params=params,
            vocab_size=vocab_size,
            rng=rng,
            round_number=round_number,
            stats=stats,
        )
        if not starts:
            break
        continue_rollouts(
            backend, starts, seed=None if seed is None else derive_seed(seed, "arpo-round", round_number), **sample
        )
        for position, trajectory, _ in placed:
            groups[position].trajectories.append(trajectory)
        stats.branches += len(placed)
        stats.rounds += 1
        frontier = placed

    fill_seed = None if seed is None else derive_seed(seed, "arpo-fill")
    _fill(backend, make_env, groups, task_indices, budget, stats, seed=fill_seed, training_step=training_step, **sample)
    stats.tool_calls = sum(own_tool_calls(t) for g in groups for t in g.trajectories)
    return groups, stats


def _tag_global_samples(groups: list[TrajectoryGroup], task_indices: Sequence[int], training_step: int | None) -> None:
    """Record each global sample's ARPO info: its id, task index, round 0 and no lineage."""
    for group, index in zip(groups, task_indices):
        for number, trajectory in enumerate(group.trajectories):
            trajectory.info[INFO_KEY] = {
                "id": f"{group.group_id}/{number}",
                "task_index": index,
                "lineage": [],
                "branch_turn": None,
                "round": 0,
                "training_step": training_step,
            }


def _choose_branches(
    groups: list[TrajectoryGroup],
    frontier: list[tuple[int, Trajectory, int]],
    make_env: Callable[[], Env],
    *,
    budget: int,
    params: ARPOConfig,
    vocab_size: int,
    rng: random.Random,
    round_number: int,
    stats: ARPOStats,
) -> tuple[list[tuple[Trajectory, Env]], list[tuple[int, Trajectory, int]]]:
    """One round's branch starts: at each tool-call point of the ``frontier`` not examined yet,
    while its group's budget lasts, a draw with the point's branch probability decides
    whether branches restart there. Returns the starts (partial trajectory, replayed env)
    and where each goes (group position, trajectory, first turn to examine next round);
    the points examined and the replay mismatches are counted in ``stats``."""
    starts: list[tuple[Trajectory, Env]] = []
    placed: list[tuple[int, Trajectory, int]] = []
    for position, parent, first_turn in frontier:
        group = groups[position]
        for turn_index in _tool_points(parent, first_turn):
            remaining = budget - len(group.trajectories) - sum(1 for p, _, _ in placed if p == position)
            if remaining <= 0:
                break
            increase = _entropy_increase(parent, turn_index, params.entropy_tokens, vocab_size)
            if increase is None:
                continue
            stats.branch_points += 1
            probability = branch_probability(
                increase, base_probability=params.base_probability, entropy_weight=params.entropy_weight
            )
            if rng.random() >= probability:
                continue
            for _ in range(min(params.branches, remaining)):
                number = len(group.trajectories) + sum(1 for p, _, _ in placed if p == position)
                start = branch_from(
                    parent, turn_index, make_env, branch_id=f"{group.group_id}/{number}", round_number=round_number
                )
                if start is None:
                    stats.replay_mismatches += 1
                    continue
                starts.append(start)
                placed.append((position, start[0], turn_index + 1))
    return starts, placed


def _fill(backend, make_env, groups, task_indices, budget, stats: ARPOStats, **sample) -> None:
    """Global samples for the budget branching left unspent, in one batched engine call."""
    wanted = [
        (position, index)
        for position, (group, index) in enumerate(zip(groups, task_indices))
        for _ in range(budget - len(group.trajectories))
    ]
    if not wanted:
        return
    extra = rollout(backend, make_env, [index for _, index in wanted], group_size=1, **sample)
    for (position, index), single in zip(wanted, extra):
        group = groups[position]
        for trajectory in single.trajectories:
            trajectory.group_id = group.group_id
            trajectory.info[INFO_KEY] = {
                "id": f"{group.group_id}/{len(group.trajectories)}",
                "task_index": index,
                "lineage": [],
                "branch_turn": None,
                "round": stats.rounds,
                "training_step": sample.get("training_step"),
            }
            group.trajectories.append(trajectory)
            stats.filled += 1
    stats.rounds += 1


def _tool_points(trajectory: Trajectory, first_turn: int) -> list[int]:
    """Turns (from ``first_turn``) that ended in a tool observation the policy answered."""
    if trajectory.infra_error is not None:
        return []
    turns = trajectory.turns
    return [i for i in range(first_turn, len(turns) - 1) if turns[i].tool_results and turns[i].observation_end]


def _entropy_increase(trajectory: Trajectory, turn_index: int, k: int, vocab_size: int) -> float | None:
    """dH at the point after ``turn_index``: the next turn's normalized first-k entropy minus the first turn's."""
    entropies = trajectory.info.get("turn_entropies") or []
    if len(entropies) <= turn_index + 1:
        return None
    initial = normalized_entropy(entropies[0], k, vocab_size)
    current = normalized_entropy(entropies[turn_index + 1], k, vocab_size)
    if initial is None or current is None:
        return None
    return current - initial


def branch_from(
    parent: Trajectory, turn_index: int, make_env: Callable[[], Env], *, branch_id: str, round_number: int
) -> tuple[Trajectory, Env] | None:
    """A partial copy of ``parent`` up to the end of turn ``turn_index``'s observation and
    a fresh env replayed to that point; None when the replay does not reproduce the
    recorded observations and rewards (or raises)."""
    meta = parent.info[INFO_KEY]
    env = make_env()
    try:
        replayed = _replay(env, parent, turn_index, meta["task_index"], meta.get("training_step"))
    except Exception:  # a replay that crashes is a mismatch, never a failed step
        replayed = None
    if replayed is None:
        _close(env)
        return None
    messages_end, reset_info, answer, correct = replayed
    position = parent.turns[turn_index].observation_end
    turns = copy.deepcopy(parent.turns[: turn_index + 1])
    lineage = [[meta["id"], position]] + [[ancestor, min(shared, position)] for ancestor, shared in meta["lineage"]]
    info = dict(reset_info)
    info["turn_entropies"] = [list(e) for e in parent.info["turn_entropies"][: turn_index + 1]]
    info[INFO_KEY] = {
        "id": branch_id,
        "task_index": meta["task_index"],
        "lineage": lineage,
        "branch_turn": turn_index,
        "round": round_number,
        "training_step": meta.get("training_step"),
    }
    branch = Trajectory(
        task_id=parent.task_id,
        group_id=parent.group_id,
        messages=[dict(m) for m in parent.messages[:messages_end]],
        prompt_length=parent.prompt_length,
        token_ids=parent.token_ids[:position],
        loss_mask=parent.loss_mask[:position],
        sampler_logprobs=parent.sampler_logprobs[:position],
        turns=turns,
        reward=sum(turn.reward for turn in turns),
        answer=answer,
        correct=correct,
        info=info,
    )
    return branch, env


def _replay(env: Env, parent: Trajectory, turn_index: int, task_index: int, training_step: int | None = None):
    """Step ``env`` through the parent's first ``turn_index + 1`` turns, checking each
    observation and reward; (messages consumed, reset info, answer, correct) or None."""
    options = {
        "task_index": task_index,
        **({"tools_prompt": "template"} if parent.template_tools else {}),
    }  # as the parent was reset
    if "tool_output_template" in parent.info:
        options["tool_output_template"] = parent.info["tool_output_template"]
    if training_step is not None:
        options["training_step"] = training_step
    messages, reset_info = env.reset(options=options)
    if list(messages) != parent.messages[: len(messages)]:
        return None
    cursor = len(messages)
    answer, correct = None, False
    for turn in parent.turns[: turn_index + 1]:
        assistant = parent.messages[cursor]
        cursor += 1
        observations, reward, terminated, truncated, info = env.step(assistant)
        if (
            terminated
            or truncated
            or float(reward) != turn.reward
            or list(observations) != parent.messages[cursor : cursor + len(observations)]
        ):
            return None
        cursor += len(observations)
        answer = info.get("answer", answer)
        correct = bool(info.get("correct", correct))
    return cursor, reset_info, answer, correct


def _close(env: Env) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass


def own_tool_calls(trajectory: Trajectory) -> int:
    """Tool calls made after the trajectory's branch point (all of them for a global sample)."""
    branch_turn = (trajectory.info.get(INFO_KEY) or {}).get("branch_turn")
    turns = trajectory.turns if branch_turn is None else trajectory.turns[branch_turn + 1 :]
    return sum(len(turn.tool_results) for turn in turns)


def branch_common_prefix(trajectories: Sequence[Trajectory]) -> torch.Tensor | None:
    """[B, B] shared-token counts of a batch from its ARPO lineages; None when nothing branched."""
    metas = [t.info.get(INFO_KEY) or {} for t in trajectories]
    if not any(meta.get("lineage") for meta in metas):
        return None
    ids = [meta.get("id", f"unbranched/{row}") for row, meta in enumerate(metas)]
    lineages = [[(ancestor, int(shared)) for ancestor, shared in meta.get("lineage", [])] for meta in metas]
    return common_prefix_lengths(lineages, ids, [len(t.token_ids) for t in trajectories])

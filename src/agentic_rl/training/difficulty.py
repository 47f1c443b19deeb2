"""Difficulty filtering: measure each task's pass rate with the current model, then keep
the tasks inside the band (the selection itself is ``data.filtering``'s pure function)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentic_rl.config import RolloutConfig
from agentic_rl.data.filtering import FilterResult, select_by_pass_rate
from agentic_rl.envs.base import Env
from agentic_rl.rollout.engine import rollout


def difficulty_filter(
    backend,
    make_env: Callable[[], Env],
    task_indices: Sequence[int],
    *,
    samples_per_task: int,
    min_pass_rate: float = 0.0,
    max_pass_rate: float = 1.0,
    rollout_config: RolloutConfig | None = None,
    seed: int | None = None,
) -> FilterResult:
    """Roll out ``samples_per_task`` episodes per task and keep tasks with
    ``min_pass_rate < pass rate < max_pass_rate`` (see ``select_by_pass_rate``)."""
    groups = rollout(
        backend, make_env, list(task_indices), group_size=samples_per_task, config=rollout_config, seed=seed
    )
    pass_rates = {
        index: sum(t.correct for t in g.trajectories) / len(g.trajectories) for index, g in zip(task_indices, groups)
    }
    return select_by_pass_rate(pass_rates, min_pass_rate=min_pass_rate, max_pass_rate=max_pass_rate)

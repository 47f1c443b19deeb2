"""Model-aware data: keep the tasks the current model sometimes, but not always, solves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentic_rl.config import RolloutConfig
from agentic_rl.envs.base import Env
from agentic_rl.rollout.engine import rollout


@dataclass
class FilterResult:
    kept: list[int]
    """Task indices whose pass rate lies in the band."""
    pass_rates: dict[int, float]
    """Pass rate per scored task index."""
    histogram: dict[str, int]
    """Number of tasks per pass rate (keys like "0.25")."""

    def to_dict(self) -> dict:
        return {"kept": self.kept, "pass_rates": {str(k): v for k, v in self.pass_rates.items()}, "histogram": self.histogram}


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
    ``min_pass_rate < pass rate < max_pass_rate`` (defaults drop never- and always-solved
    tasks: their groups have zero reward variance and teach GRPO nothing)."""
    groups = rollout(backend, make_env, list(task_indices), group_size=samples_per_task, config=rollout_config, seed=seed)
    pass_rates = {index: sum(t.correct for t in g.trajectories) / len(g.trajectories) for index, g in zip(task_indices, groups)}
    kept = [index for index, rate in pass_rates.items() if min_pass_rate < rate < max_pass_rate]
    histogram = dict(sorted(Counter(f"{rate:.2f}" for rate in pass_rates.values()).items()))
    return FilterResult(kept, pass_rates, histogram)

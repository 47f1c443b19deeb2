"""Cold-start SFT data from the model's own successful rollouts.

The model attempts training tasks with few-shot demonstrations in its prompt; the
successful episodes are stored without the demonstrations, so SFT teaches the behaviour
on the plain prompt that RL and evaluation use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentic_rl import envs
from agentic_rl.config import CollectConfig, RolloutConfig
from agentic_rl.data.conversations import trajectory_to_example
from agentic_rl.distributed import DistContext
from agentic_rl.rollout.engine import rollout
from agentic_rl.types import Trajectory


@dataclass
class CollectResult:
    examples: list[dict] = field(default_factory=list)
    attempted: int = 0
    """Trajectories sampled."""
    successful: int = 0
    """Trajectories with reward > 0 and no infrastructure error (before the per-task cap)."""
    tasks_with_success: int = 0
    wall_time_s: float = 0.0


def collect_successful(
    backend,
    env_name: str,
    env_options: dict,
    config: CollectConfig,
    *,
    seed: int = 0,
    rollout_config: RolloutConfig | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
    dist: DistContext | None = None,
) -> CollectResult:
    """Sample ``config.samples_per_task`` episodes on each of ``config.num_tasks`` training
    tasks and keep the first ``config.max_per_task`` successful ones per task as
    ``{"messages", "metadata"}`` examples. ``dist``: data-parallel ranks each sample every
    world-size-th task (the samples one process would draw for it) and all get the whole result."""
    started = time.monotonic()
    options = dict(env_options)
    # Collection always runs on the train split with its own demonstrations (when the env has these knobs).
    if envs.accepts_option(env_name, "split"):
        options["split"] = "train"
    if envs.accepts_option(env_name, "few_shot"):
        options["few_shot"] = config.few_shot
    probe = envs.make(env_name, **options)
    num_demo_messages = sum(len(demo) for demo in getattr(probe, "demonstrations", []))
    parser = getattr(probe, "parser", None) or "hermes"
    sampling = (rollout_config or RolloutConfig()).model_copy(update={"temperature": config.temperature})
    dist = dist or DistContext()
    mine = collect_positions(config, dist)
    tasks = [config.task_offset + position for position in mine]
    groups = rollout(
        backend, lambda: envs.make(env_name, **options), tasks, group_size=config.samples_per_task, config=sampling, seed=seed, on_finish=on_trajectory,
        task_positions=mine if dist.distributed else None,
    )
    if dist.distributed:
        groups = dist.gather_by_position(mine, groups, config.num_tasks)

    result = CollectResult()
    for group in groups:
        result.attempted += len(group.trajectories)
        good = [t for t in group.trajectories if t.reward > 0 and t.infra_error is None]
        result.successful += len(good)
        result.tasks_with_success += bool(good)
        for trajectory in good[: config.max_per_task]:
            result.examples.append(trajectory_to_example(trajectory, parser, skip_messages=num_demo_messages))
    result.wall_time_s = time.monotonic() - started
    return result


def collect_positions(config: CollectConfig, dist: DistContext) -> list[int]:
    """The positions (0 .. num_tasks - 1) of the collection tasks this rank samples."""
    return list(range(dist.rank, config.num_tasks, dist.world_size))

"""How an RL step samples its groups (``rl.sampling``): ``group_size`` independent samples
per task, or ARPO's entropy-based branching; each ``fn(trainer, task_indices, seed) ->
(groups, metrics)`` of an ``RLTrainer`` (its config, engine, env factory, ranks and step)."""

from __future__ import annotations

from agentic_rl.rollout.arpo import ARPOStats, arpo_rollout
from agentic_rl.rollout.engine import rollout
from agentic_rl.rollout.roles import episode_turns, gather_task_groups, role_metrics
from agentic_rl.seeds import derive_seed
from agentic_rl.types import TrajectoryGroup

__all__ = ["ROLLOUT_MODES"]


def sample_groups(trainer, task_indices: list[int], seed: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """``group_size`` independent samples per task. With several ranks each rolls out every
    world-size-th task (whole groups: the group advantage needs them together), as one
    process would sample it, and every rank receives all groups in task order."""
    config, dist = trainer.config, trainer.dist
    if config.distributed.engine == "ray":  # workers own the envs (distributed/ray_rollouts.py); rank 0 asks
        return dist.broadcast_object(
            trainer.backend.rollout(
                task_indices, group_size=config.rl.group_size, seed=seed, training_step=trainer.step_index
            )
            if dist.is_main
            else None
        ), {}
    mine = list(range(dist.rank, len(task_indices), dist.world_size))
    positions = mine if dist.distributed else None
    groups = rollout(
        trainer.backend,
        trainer.make_env,
        [task_indices[i] for i in mine],
        group_size=config.rl.group_size,
        config=config.rollout,
        seed=seed,
        task_positions=positions,
        training_step=trainer.step_index,
        on_finish=trainer.on_trajectory,
    )
    if config.algorithm.advantage.name == "remax":
        add_greedy_baselines(trainer, groups, [task_indices[i] for i in mine], seed, positions)
    if dist.distributed:
        groups = gather_task_groups(dist, mine, groups, len(task_indices))
    if config.algorithm.advantage.name != "remax":
        return groups, role_metrics(groups, episode_turns(groups))  # an env with roles: per-role figures
    return groups, {"remax_baseline_reward": sum(g.baseline.reward for g in groups) / max(len(groups), 1)}


def add_greedy_baselines(
    trainer,
    groups: list[TrajectoryGroup],
    task_indices: list[int],
    seed: int,
    positions: list[int] | None,
) -> None:
    """ReMax: each group's task rolled out once more, greedily (temperature 0, the policy's
    most likely answer), as its baseline. A baseline that failed for infrastructure reasons
    leaves its group unscorable: the group's samples leave the loss as infra failures."""
    greedy = trainer.config.rollout.model_copy(update={"temperature": 0.0})
    baselines = rollout(
        trainer.backend,
        trainer.make_env,
        task_indices,
        group_size=1,
        config=greedy,
        seed=seed,  # greedy: no randomness to draw
        task_positions=positions,
        training_step=trainer.step_index,
    )
    for group, baseline in zip(groups, baselines, strict=True):
        group.baseline = baseline.trajectories[0]
        if group.baseline.infra_error is not None:
            for trajectory in group.trajectories:
                trajectory.infra_error = trajectory.infra_error or f"remax baseline: {group.baseline.infra_error}"


def sample_arpo(trainer, task_indices: list[int], seed: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """ARPO's entropy-based branching with a budget of ``group_size`` per task. With several
    ranks each branches on every world-size-th task (a group's branches stay on the rank
    that sampled its prefixes) from a seed of its own, so the samples differ from one
    process's; every rank receives all groups in task order and the summed statistics."""
    config, dist = trainer.config, trainer.dist
    mine = list(range(dist.rank, len(task_indices), dist.world_size))
    rank_seed = seed if not dist.distributed else derive_seed(seed, "arpo-rank", dist.rank)
    groups, stats = arpo_rollout(
        trainer.backend,
        trainer.make_env,
        [task_indices[i] for i in mine],
        budget=config.rl.group_size,
        params=config.rl.arpo,
        config=config.rollout,
        seed=rank_seed,
        training_step=trainer.step_index,
    )
    if not dist.distributed:
        return groups, stats.metrics()
    return dist.gather_by_position(mine, groups, len(task_indices)), ARPOStats.total(
        dist.all_gather_objects(stats)
    ).metrics()


ROLLOUT_MODES = {"group": sample_groups, "arpo": sample_arpo}
"""How a step samples its groups, by ``rl.sampling``: ``fn(trainer, task_indices, seed) -> (groups, metrics)``."""

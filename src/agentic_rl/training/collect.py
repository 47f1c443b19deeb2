"""Cold-start SFT data: the model's own successful rollouts, or an env's expert.

``source: model``: the model attempts training tasks with few-shot demonstrations in its
prompt; the correct episodes are stored without the demonstrations, so SFT teaches the
behaviour on the plain prompt that RL and evaluation use. ``source: expert``: an env that
has a scripted expert (``expert_reply``) plays each training task itself, through the
env's own tools and scoring: teacher trajectories for a model too weak to find the
behaviour in its own samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentic_rl import envs
from agentic_rl.config import CollectConfig, ConfigError, RolloutConfig
from agentic_rl.data.conversations import trajectory_to_example
from agentic_rl.distributed import DistContext
from agentic_rl.rollout.engine import rollout
from agentic_rl.rollout.episode import reset_options
from agentic_rl.types import Trajectory

if TYPE_CHECKING:
    from agentic_rl.rollout.chat import ChatRenderer


@dataclass
class CollectResult:
    examples: list[dict] = field(default_factory=list)
    attempted: int = 0
    """Trajectories sampled."""
    successful: int = 0
    """Correct trajectories with no infrastructure error (before the per-task cap)."""
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
        # Correct, not merely rewarded: a partial term (a format reward) pays wrong answers too,
        # and fine-tuning on those teaches exactly the shortcut it pays for.
        good = [t for t in group.trajectories if t.correct and t.infra_error is None]
        result.successful += len(good)
        result.tasks_with_success += bool(good)
        for trajectory in good[: config.max_per_task]:
            result.examples.append(trajectory_to_example(trajectory, parser, skip_messages=num_demo_messages))
    result.wall_time_s = time.monotonic() - started
    return result


def collect_positions(config: CollectConfig, dist: DistContext) -> list[int]:
    """The positions (0 .. num_tasks - 1) of the collection tasks this rank samples."""
    return list(range(dist.rank, config.num_tasks, dist.world_size))


def collect_expert(env_name: str, env_options: dict, config: CollectConfig, *, renderer: ChatRenderer | None = None) -> CollectResult:
    """One expert episode per training task (``config.num_tasks`` from ``task_offset``),
    played by the env's ``expert_reply()`` through ``step`` so its tool results and scoring
    are the env's own; the correct ones are kept as SFT examples. Deterministic and cheap,
    so every rank builds the whole set itself. ``renderer``: the chat template of the model
    the data is for; the env resets as a rollout on it does (tools described by a template
    that renders them, results framed by one that frames them), so the examples hold the
    layout RL and evaluation will show that model."""
    started = time.monotonic()
    options = dict(env_options)
    if envs.accepts_option(env_name, "split"):
        options["split"] = "train"
    if envs.accepts_option(env_name, "few_shot"):
        options["few_shot"] = 0  # the expert needs no demonstrations; none are stored either
    env = envs.make(env_name, **options)
    if not callable(getattr(env, "expert_reply", None)):
        raise ConfigError(f"sft.collect.source: 'expert' needs an env with a scripted expert (expert_reply); {env_name} has none, use source: model")
    parser = getattr(env, "parser", None) or "hermes"
    max_turns = getattr(env, "max_turns", 16)
    result = CollectResult()
    try:
        for position in range(config.num_tasks):
            index = config.task_offset + position
            messages, reset_info = env.reset(options=reset_options(index, renderer))
            messages = list(messages)
            info: dict = {}
            reward = 0.0
            for _ in range(max_turns):
                reply = {"role": "assistant", "content": env.expert_reply()}
                observations, reward, terminated, truncated, info = env.step(reply)
                messages += [reply, *observations]
                if terminated or truncated:
                    break
            trajectory = Trajectory(
                task_id=str(reset_info.get("task_id", index)), group_id=f"expert-{index}", messages=messages, reward=float(reward), correct=bool(info.get("correct")), answer=info.get("answer"),
                info=dict(reset_info),
            )
            result.attempted += 1
            if trajectory.correct:
                result.successful += 1
                result.tasks_with_success += 1
                result.examples.append(trajectory_to_example(trajectory, parser))
    finally:
        close = getattr(env, "close", None)  # optional in the Env contract
        if callable(close):
            close()
    result.wall_time_s = time.monotonic() - started
    return result


def mix_shares(mix: list[dict], config: CollectConfig) -> list[tuple[str, dict, CollectConfig]]:
    """(env name, options, collection settings) per entry of ``env.mix``: ``num_tasks``
    split in proportion to the weights (at least one task each)."""
    from agentic_rl.envs.mixed import parse_mix

    entries = parse_mix(mix)
    total = sum(entry.weight for entry in entries)
    return [(entry.name, entry.options, config.model_copy(update={"num_tasks": max(1, round(config.num_tasks * entry.weight / total))})) for entry in entries]


def collect_successful_mix(backend, mix: list[dict], config: CollectConfig, **kwargs) -> CollectResult:
    """``collect_successful`` on each entry of ``env.mix`` (``mix_shares``), the examples
    and counts put together; ``kwargs`` as for ``collect_successful``."""
    started = time.monotonic()
    result = CollectResult()
    for name, options, share in mix_shares(mix, config):
        part = collect_successful(backend, name, options, share, **kwargs)
        result.examples += part.examples
        result.attempted += part.attempted
        result.successful += part.successful
        result.tasks_with_success += part.tasks_with_success
    result.wall_time_s = time.monotonic() - started
    return result

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
from agentic_rl.engines.base import Completion
from agentic_rl.rollout.engine import rollout
from agentic_rl.rollout.episode import Episode
from agentic_rl.rollout.roles import gather_task_groups
from agentic_rl.types import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from agentic_rl.chat import ChatRenderer


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
        backend,
        lambda: envs.make(env_name, **options),
        tasks,
        group_size=config.samples_per_task,
        config=sampling,
        seed=seed,
        on_finish=on_trajectory,
        task_positions=mine if dist.distributed else None,
    )
    if dist.distributed:
        groups = gather_task_groups(dist, mine, groups, config.num_tasks)

    result = CollectResult()
    for group in groups:
        result.attempted += len(group.trajectories)
        # Correct, not merely rewarded: a partial term (a format reward) pays wrong answers too,
        # and fine-tuning on those teaches exactly the shortcut it pays for.
        good = [t for t in group.trajectories if t.correct and t.infra_error is None]
        result.successful += len(good)
        result.tasks_with_success += bool(good)
        for trajectory in good[
            : config.max_per_task
        ]:  # one example per sample: a context policy's segments each hold what the model saw
            result.examples += [
                trajectory_to_example(sample, parser, skip_messages=num_demo_messages) for sample in trajectory.samples
            ]
    result.wall_time_s = time.monotonic() - started
    return result


def collect_positions(config: CollectConfig, dist: DistContext) -> list[int]:
    """The positions (0 .. num_tasks - 1) of the collection tasks this rank samples."""
    return list(range(dist.rank, config.num_tasks, dist.world_size))


def collect_expert(
    env_name: str,
    env_options: dict,
    config: CollectConfig,
    *,
    renderer: ChatRenderer | None = None,
    rollout_config: RolloutConfig | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> CollectResult:
    """One expert episode per training task (``config.num_tasks`` from ``task_offset``),
    played by the env's ``expert_reply()`` through the rollout's own episode state machine
    (rollout/episode.py), so tool results, scoring, turn and token limits and the context
    policy are those of a rollout under ``rollout_config`` (default: ``RolloutConfig()``);
    the correct episodes are kept as SFT examples, one per sample (an episode whose context
    policy cut its history gives one example per segment, each holding exactly the context
    the model is shown there). Under ``summarize`` the expert also writes the summaries
    (the env's ``expert_summary()``). Deterministic and cheap, so every rank builds the
    whole set itself. ``renderer``: the chat template of the model the data is for; the env
    resets as a rollout on it does (tools described by a template that renders them,
    results framed by one that frames them), and the context policies count its tokens
    (without one, episodes are chat-level: the whole history, as ``full``). ``on_trajectory``:
    called with each finished episode (a progress display)."""
    started = time.monotonic()
    limits = rollout_config or RolloutConfig()
    options = dict(env_options)
    if envs.accepts_option(env_name, "split"):
        options["split"] = "train"
    if envs.accepts_option(env_name, "few_shot"):
        options["few_shot"] = 0  # the expert needs no demonstrations; none are stored either
    probe = envs.make(env_name, **options)
    try:
        if not callable(getattr(probe, "expert_reply", None)):
            raise ConfigError(
                f"sft.collect.source: 'expert' needs an env with a scripted expert (expert_reply); {env_name} has none, use source: model"
            )
        if (
            limits.context == "summarize"
            and renderer is not None
            and not callable(getattr(probe, "expert_summary", None))
        ):
            raise ConfigError(
                f"sft.collect.source: 'expert' with rollout.context summarize needs an env whose expert writes the summaries (expert_summary); {env_name} has none: "
                "use another context policy or source: model"
            )
        parser = getattr(probe, "parser", None) or "hermes"
    finally:
        _close(probe)
    result = CollectResult()
    for position in range(config.num_tasks):
        index = config.task_offset + position
        played = play_expert(lambda: envs.make(env_name, **options), index, limits=limits, renderer=renderer)
        result.attempted += 1
        if on_trajectory is not None:
            on_trajectory(played[0])
        if all(trajectory.correct for trajectory in played):  # an env with roles: every role's part succeeded
            result.successful += 1
            result.tasks_with_success += 1
            result.examples += [trajectory_to_example(s, parser) for trajectory in played for s in trajectory.samples]
    result.wall_time_s = time.monotonic() - started
    return result


def play_expert(
    make_env: Callable[[], object], task_index: int, *, limits: RolloutConfig, renderer: ChatRenderer | None
) -> list[Trajectory]:
    """One episode of ``task_index`` played by the env's scripted expert (``expert_reply``,
    and ``expert_summary`` for the summaries ``summarize`` asks for) through the rollout's
    ``Episode`` under ``limits``: its samples (``trajectory.samples``) hold exactly the
    tokens a rollout would, the expert's text standing in for sampled tokens (its
    ``logprobs`` are 0). Returns every role's trajectory (an env with roles: the expert
    plays whichever role's turn it is). An env failure raises: the expert's own env must not fail."""
    group = TrajectoryGroup(task_id=str(task_index), group_id=f"expert-{task_index}")
    episode = Episode.reset(make_env, task_index, group, limits=limits, renderer=renderer, on_finish=None)
    while not episode.finished:
        env = episode.env
        text = env.expert_summary() if episode.summarizing else env.expert_reply()
        if renderer is None:
            turn, message = episode.take_reply(text, "stop")
        else:
            ids = renderer.encode_untrusted(text) + [renderer.end_of_turn_id(text)]
            turn, message = episode.take_completion(
                Completion(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")
            )
        episode.apply_step(turn, episode.env_step(message))
    if episode.trajectory.infra_error:  # a bug to see, not data to drop
        raise RuntimeError(f"expert episode of task {task_index}: {episode.trajectory.infra_error}")
    return episode.trajectories


def _close(env) -> None:
    close = getattr(env, "close", None)  # optional in the Env contract
    if callable(close):
        close()


def mix_shares(mix: list[dict], config: CollectConfig) -> list[tuple[str, dict, CollectConfig]]:
    """(env name, options, collection settings) per entry of ``env.mix``: ``num_tasks``
    split in proportion to the weights (at least one task each)."""
    from agentic_rl.envs.mixed import parse_mix

    entries = parse_mix(mix)
    total = sum(entry.weight for entry in entries)
    return [
        (
            entry.name,
            entry.options,
            config.model_copy(update={"num_tasks": max(1, round(config.num_tasks * entry.weight / total))}),
        )
        for entry in entries
    ]


def collect_mix(
    collect_entry: Callable[[str, dict, CollectConfig], CollectResult], mix: list[dict], config: CollectConfig
) -> CollectResult:
    """``collect_entry(name, options, share)`` on each entry of ``env.mix`` (``mix_shares``),
    the examples and counts put together."""
    started = time.monotonic()
    result = CollectResult()
    for name, options, share in mix_shares(mix, config):
        part = collect_entry(name, options, share)
        result.examples += part.examples
        result.attempted += part.attempted
        result.successful += part.successful
        result.tasks_with_success += part.tasks_with_success
    result.wall_time_s = time.monotonic() - started
    return result


def collect_successful_mix(backend, mix: list[dict], config: CollectConfig, **kwargs) -> CollectResult:
    """``collect_successful`` on each entry of ``env.mix`` (``collect_mix``); ``kwargs`` as for ``collect_successful``."""
    return collect_mix(
        lambda name, options, share: collect_successful(backend, name, options, share, **kwargs), mix, config
    )


def collect_expert_mix(mix: list[dict], config: CollectConfig, **kwargs) -> CollectResult:
    """``collect_expert`` on each entry of ``env.mix`` (``collect_mix``; every entry's env
    needs an expert); ``kwargs`` as for ``collect_expert``."""
    return collect_mix(lambda name, options, share: collect_expert(name, options, share, **kwargs), mix, config)

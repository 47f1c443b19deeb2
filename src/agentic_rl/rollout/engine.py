"""The multi-turn rollout engine: episodes for task indices, run to the end by a scheduler.

Token-in-token-out: sampled tokens keep their sampler logprobs and loss_mask 1,
observations are rendered once and get loss_mask 0 (``rollout/episode.py``). Which
scheduler runs them (one batched call per turn, or continuous batching with KV reuse
across turns) is chosen once from the engine's capabilities (``rollout/schedulers.py``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import RolloutConfig
from agentic_rl.engines.base import SamplingParams
from agentic_rl.envs.base import Env
from agentic_rl.rollout.episode import Episode, OnFinish
from agentic_rl.rollout.roles import role_groups
from agentic_rl.rollout.schedulers import scheduler_for
from agentic_rl.seeds import stream_seed
from agentic_rl.types import Trajectory, TrajectoryGroup

ENV_STEP_THREADS = 16
"""Env steps (and so tool calls) that run at once."""


def rollout(
    backend,
    make_env: Callable[[], Env],
    task_indices: Sequence[int],
    *,
    group_size: int = 1,
    config: RolloutConfig | None = None,
    seed: int | None = None,
    return_entropy: bool = False,
    on_finish: OnFinish | None = None,
    task_positions: Sequence[int] | None = None,
    training_step: int | None = None,
) -> list[TrajectoryGroup]:
    """Run ``group_size`` episodes for each task index and return one group per task.

    ``backend`` is a token engine (``interface == "tokens"``: HF, scripted, vLLM) or a chat
    engine (``interface == "chat"``: OpenAI-compatible endpoints; no token-level data is
    recorded). ``make_env`` builds a fresh env per trajectory (envs hold episode state).
    ``config``: sampling and episode limits; ``seed``: the same seed gives the same samples
    (None: fresh randomness); ``return_entropy``: keep each turn's per-token sampling
    entropies in ``trajectory.info["turn_entropies"]`` (token engines; ARPO branches on them).
    ``task_positions``: each task's position in a larger batch that other processes share
    (data-parallel ranks): episode j of the task at position p draws from stream
    ``p * group_size + j``, so a rank samples what one process sampling the whole batch would.
    ``training_step``: given to each env's reset as ``options["training_step"]``.
    An env with roles gives one group per task and role (``rollout/roles.py``), a task's
    groups next to each other (data-parallel ranks gather them with ``roles.per_task``).
    """
    config = config or RolloutConfig()
    renderer = ChatRenderer(backend.tokenizer) if backend.interface == "tokens" else None
    groups: list[TrajectoryGroup] = []
    episodes: list[Episode] = []
    for index in task_indices:
        group = TrajectoryGroup(task_id="", group_id=uuid.uuid4().hex[:12], task_index=index)
        for _ in range(group_size):
            episodes.append(
                Episode.reset(
                    make_env,
                    index,
                    group,
                    limits=config,
                    renderer=renderer,
                    on_finish=on_finish,
                    training_step=training_step,
                )
            )
        groups.append(group)
    ordinals = (
        None if task_positions is None else [p * group_size + j for p in task_positions for j in range(group_size)]
    )
    run_episodes(episodes, backend, config, seed=seed, return_entropy=return_entropy, ordinals=ordinals)
    if not any(episode.cast for episode in episodes):
        return groups
    roles = next(episode.cast.roles for episode in episodes if episode.cast)
    return [  # a multi-role env: one group per task and role
        split
        for position, group in enumerate(groups)
        for split in role_groups(
            group.task_index,
            group.task_id,
            group.group_id,
            [
                e.cast.by_role if e.cast and e.cast.by_role else {None: e.trajectory}
                for e in episodes[position * group_size : (position + 1) * group_size]
            ],
            roles,
        )
    ]


def continue_rollouts(
    backend,
    starts: Sequence[tuple[Trajectory, Env]],
    *,
    config: RolloutConfig | None = None,
    seed: int | None = None,
    return_entropy: bool = False,
    on_finish: OnFinish | None = None,
) -> None:
    """Run partial trajectories to the end, in place (ARPO's branches).

    Each start is a token-level trajectory that ends right after an observation (the next
    thing to sample is an assistant turn) and an env already in the state that follows it.
    """
    config = config or RolloutConfig()
    renderer = ChatRenderer(backend.tokenizer)
    episodes = [Episode(trajectory, env, config, renderer, on_finish) for trajectory, env in starts]
    run_episodes(episodes, backend, config, seed=seed, return_entropy=return_entropy)


def run_episodes(
    episodes: list[Episode],
    backend,
    config: RolloutConfig,
    *,
    seed: int | None,
    return_entropy: bool,
    ordinals: Sequence[int] | None = None,
) -> None:
    """Give each unfinished episode its own random stream (the ``ordinals``-th, one per
    episode, when given; else numbered in order) and run them all to the end."""
    base_seed = seed if seed is not None else random.getrandbits(62)
    if ordinals is not None:
        for ordinal, episode in zip(ordinals, episodes, strict=True):
            episode.seed = stream_seed(base_seed, ordinal)
    for ordinal, episode in enumerate(e for e in episodes if not e.finished and ordinals is None):
        episode.seed = stream_seed(base_seed, ordinal)
    sampling = SamplingParams(
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        seed=seed,
        return_entropy=return_entropy,
    )
    scheduler = scheduler_for(backend, continuous_batching=config.continuous_batching)
    pool = ThreadPoolExecutor(max_workers=ENV_STEP_THREADS, thread_name_prefix="env-step")
    try:
        scheduler(episodes, backend, sampling, pool)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)

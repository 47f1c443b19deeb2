"""A rollout worker: the process (a Ray actor) that owns an engine, envs and their tool
sandboxes, and turns rollout requests into trajectory groups.

The worker holds its own copy of the policy (loaded once, then fed the trainer's weights)
and runs every request's episodes in one continuous-batching session on a service thread
(``run_continuous`` in service mode): requests that arrive while others decode join the
same batch. New weights are staged by whichever thread receives them and applied by the
service thread between two decode steps (engines/staged.py): an episode in flight during
a weight sync continues with the new weights, its turns tagged with the versions
(partial rollouts).

Plain Python: ``distributed/ray_rollouts.py`` wraps it with ``ray.remote``; tests drive it
directly.
"""

from __future__ import annotations

import os
import queue
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import TrainConfig
from agentic_rl.engines.base import SamplingParams
from agentic_rl.rollout.engine import ENV_STEP_THREADS
from agentic_rl.rollout.episode import Episode
from agentic_rl.rollout.schedulers import run_continuous
from agentic_rl.types import Trajectory, TrajectoryGroup

SERVICE_POLL_S = 1.0
"""How often a waiting request checks that the service thread is still alive."""


def failed_group(task_index: int, group_size: int, error: str) -> TrajectoryGroup:
    """The group of a request whose worker failed (died, or its service crashed): every
    trajectory an infrastructure error, so it leaves the loss and is counted."""
    group = TrajectoryGroup(task_id=str(task_index), group_id=uuid.uuid4().hex[:12], task_index=task_index)
    group.trajectories = [
        Trajectory(task_id=str(task_index), group_id=group.group_id, infra_error=error, termination_reason="error")
        for _ in range(group_size)
    ]
    return group


class RolloutWorker:
    """Episodes for rollout requests, sampled by the worker's engine.

    ``config``: the run's training config (model, backend, env, rollout limits);
    ``precision``: the trainer's resolved precision (bf16-mixed samples from bf16 weights);
    ``threads``: torch threads for decoding (Ray reserves the worker's CPUs)."""

    def __init__(
        self, config: TrainConfig, *, precision: str = "fp32", threads: int = 1, engine=None, make_env=None
    ) -> None:
        from agentic_rl.engines.factory import build_backend
        from agentic_rl.envs.registry import env_factory

        torch.set_num_threads(max(1, int(threads)))
        self.config = config
        self.backend = (
            engine if engine is not None else build_backend(config.backend, config.model, precision=precision)
        )
        self.make_env = (
            make_env if make_env is not None else env_factory(config.env.name, config.env.options, split="train")
        )
        self.renderer = ChatRenderer(self.backend.tokenizer)
        self._incoming: queue.Queue[Episode] = queue.Queue()
        self._stop = threading.Event()
        self._newest = self.backend.weight_version
        """The newest weight version applied or staged."""
        self._lock = threading.Lock()
        self._failure: str | None = None
        self._service = threading.Thread(target=self._serve, name="rollout-service", daemon=True)
        self._service.start()

    def _serve(self) -> None:
        rollout = self.config.rollout
        sampling = SamplingParams(
            temperature=rollout.temperature, top_p=rollout.top_p, max_new_tokens=rollout.max_new_tokens
        )
        try:
            with ThreadPoolExecutor(max_workers=ENV_STEP_THREADS, thread_name_prefix="env-step") as pool:
                run_continuous([], self.backend, sampling, pool, incoming=self._incoming, stop=self._stop)
        except BaseException as exc:  # every waiting request must learn of it (they fail as infra errors)
            self._failure = f"rollout service failed: {type(exc).__name__}: {exc}"
            raise

    def stage_weights(self, weights: Any, version: int) -> int:
        """Sample from ``weights`` (full tensors by name, or ``[ObjectRef]`` of them) as
        ``version`` from the next decode step on, episodes in flight included. Returns
        the newest version the worker has."""
        with self._lock:  # held while fetching: a request must not start sampling before its weights are staged
            if version <= self._newest:
                return self._newest
            self.backend.stage_weights(_resolve(weights), int(version))
            self._newest = int(version)
            return self._newest

    def rollout_group(
        self,
        task_index: int,
        seeds: list[int],
        min_version: int = 0,
        weights: Any = None,
        training_step: int | None = None,
    ) -> TrajectoryGroup:
        """``len(seeds)`` episodes of ``task_index`` (episode j draws from stream
        ``seeds[j]``), sampled by weights of version ``min_version`` or newer: a worker
        behind (e.g. restarted) first loads ``weights`` (``[ObjectRef]`` or tensors by name).
        ``training_step`` reaches each env's reset as in process (schedules such as
        ZeroSearch's noise read it)."""
        if self._newest < min_version:
            if weights is None:
                raise ValueError(
                    f"rollout worker has weights version {self._newest}, the request needs {min_version} and carries none"
                )
            self.stage_weights(weights, min_version)
        group = TrajectoryGroup(task_id=str(task_index), group_id=uuid.uuid4().hex[:12], task_index=task_index)
        remaining = [len(seeds)]
        done = threading.Event()
        counter = threading.Lock()

        def on_finish(_: Trajectory) -> None:
            with counter:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        episodes = [
            Episode.reset(
                self.make_env,
                task_index,
                group,
                limits=self.config.rollout,
                renderer=self.renderer,
                on_finish=on_finish,
                training_step=training_step,
            )
            for _ in seeds
        ]
        for episode, seed in zip(episodes, seeds):
            episode.seed = int(seed)
            if not episode.finished:
                self._incoming.put(episode)
        if not seeds:
            return group
        while not done.wait(SERVICE_POLL_S):
            if self._failure is not None or not self._service.is_alive():
                raise RuntimeError(self._failure or "rollout service stopped")
        return group

    def memory_state(self) -> list[dict[str, Any]]:
        """This worker's shared memory stores (``env.memory: shared``: each worker process
        keeps its own), as a checkpoint saves them."""
        from agentic_rl.tools.memory_store import shared_stores_state

        return shared_stores_state()

    def load_memory(self, states: list[dict[str, Any]]) -> None:
        """Restore :meth:`memory_state`'s stores (a resumed run)."""
        from agentic_rl.tools.memory_store import load_shared_stores

        load_shared_stores(states)

    def info(self) -> dict[str, Any]:
        """Where the worker runs: process id, node address, weight version (tests, logs)."""
        import socket

        try:
            import ray

            node = ray.util.get_node_ip_address()
        except Exception:
            node = socket.gethostname()
        return {"pid": os.getpid(), "node": node, "weight_version": self.backend.weight_version, "newest": self._newest}

    def close(self) -> None:
        self._stop.set()
        self._service.join(timeout=30)
        self.backend.close()


def _resolve(weights: Any) -> Any:
    """Tensors by name from ``weights``, fetching ``[ObjectRef]`` from the object store (a
    list keeps Ray from resolving the reference for calls that do not need it)."""
    if isinstance(weights, list):
        import ray

        return ray.get(weights[0])
    return weights

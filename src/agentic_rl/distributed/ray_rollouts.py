"""Rollouts on a Ray cluster: rollout worker actors (distributed/rollout_worker.py) placed
by Ray, fed the trainer's weights through the object store, in sync or async mode.

To the trainer this is its engine (``distributed.engine: ray``): ``sync_weights`` after
every update (one ``ray.put``, each worker stages the weights), ``weight_version``, and
``rollout`` / ``stream`` in place of in-process rollouts:

- sync mode (``rollout``): each step's tasks are spread over the workers; episode j of the
  task at position p draws from stream ``p * group_size + j``, as one process sampling the
  whole batch would, so the samples equal the single-process trainer's for the same seed.
- async mode (``stream``): a :class:`GroupStream` keeps requesting groups while the
  trainer updates, bounded by ``max_staleness`` (distributed/async_stream.py).

A worker that dies (killed, out of memory) fails its requests: their groups come back as
infrastructure errors (out of the loss, counted), Ray restarts the actor, and its next
request carries the newest weights so it catches up before sampling.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from agentic_rl.config import ConfigError, TrainConfig
from agentic_rl.distributed.async_stream import GroupStream
from agentic_rl.distributed.rollout_worker import RolloutWorker, failed_group
from agentic_rl.engines.base import SharedWeights
from agentic_rl.seeds import derive_seed, stream_seed
from agentic_rl.types import TrajectoryGroup

WORKER_RESTART_TIMEOUT_S = 300.0
"""How long requests wait for a failed worker to come back (Ray restarts it) before its
tasks count as infrastructure errors."""

MAX_CONCURRENT_REQUESTS = 1024
"""Requests one worker holds at once (each waits in a thread while its episodes decode in the shared session)."""


def import_ray():
    """The ``ray`` module, or MissingPackage: one line naming the install."""
    from agentic_rl.optional import require

    return require("ray", "pip install 'agentic-rl[ray]'", "distributed.engine: ray")


def connect(address: str | None, *, log_to_driver: bool = False) -> bool:
    """Join the Ray cluster at ``address`` (None: RAY_ADDRESS, else start one on this
    machine) unless this process already did (or runs inside a Ray actor); returns whether
    this call started Ray. ``log_to_driver``: show the actors' output here (trainer ranks)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=log_to_driver,
            logging_level="WARNING",
            configure_logging=True,
        )
    except ConnectionError as error:
        raise ConfigError(f"distributed.ray_address: cannot join the Ray cluster at {address}: {error}") from None
    return True


class RayRollouts:
    """Rollout workers on Ray behind the engine contract the trainer uses (``sync_weights``,
    ``weight_version``, ``close``) plus ``rollout`` (sync mode) and ``stream`` (async)."""

    interface = "tokens"
    separate_weights = True
    """The workers sample from their own copies: rollout correction applies."""

    def __init__(
        self, config: TrainConfig, weights: torch.nn.Module | Mapping[str, torch.Tensor], *, precision: str = "fp32"
    ) -> None:
        ray = import_ray()
        settings = config.distributed
        self.config = config
        self._owns_ray = connect(settings.ray_address)
        self._dtype = torch.bfloat16 if precision == "bf16-mixed" else None
        actor = ray.remote(RolloutWorker).options(
            num_cpus=settings.worker_cpus,
            num_gpus=settings.worker_gpus or None,
            resources=dict(settings.worker_resources) or None,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=MAX_CONCURRENT_REQUESTS,
        )
        threads = max(1, int(settings.worker_cpus))
        self.workers = [
            actor.remote(config, precision=precision, threads=threads) for _ in range(settings.rollout_workers)
        ]
        self.weight_version = 0
        self._weights_ref = None
        self._publish(weights)
        self._load = [0] * len(self.workers)
        """Requests in flight per worker (async mode sends each group to the least loaded)."""
        self._down: dict[int, Any] = {}
        """Workers whose requests failed, with the liveness probe in flight (None: none yet)."""

    def _publish(self, source: torch.nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Put the weights in the object store (once for every worker) and stage them on
        each worker (fire and forget: requests carry the reference too)."""
        named = source.items() if isinstance(source, Mapping) else source.named_parameters()
        weights = {
            name: (value.detach().to(self._dtype) if self._dtype is not None else value.detach()).cpu()
            for name, value in named
        }
        ray = import_ray()
        self._weights_ref = ray.put(weights)
        for worker in self.workers:
            worker.stage_weights.remote([self._weights_ref], self.weight_version)

    def sync_weights(self, source: Any = None) -> int:
        """Ship the trainer's new weights (a model or full tensors by name) to every worker."""
        self.weight_version += 1
        self._publish(source)
        return self.weight_version

    def _request(self, worker: int, task_index: int, seeds: list[int], training_step: int | None):
        return self.workers[worker].rollout_group.remote(
            task_index, seeds, self.weight_version, [self._weights_ref], training_step
        )

    def _healthy(self, worker: int) -> bool:
        """Whether ``worker`` takes requests: not known to have failed, or answering again
        (a non-blocking probe; Ray restarts a dead worker, requests sent meanwhile fail)."""
        if worker not in self._down:
            return True
        ray = import_ray()
        probe = self._down[worker]
        if probe is None:
            probe = self._down[worker] = self.workers[worker].info.remote()
        ready, _ = ray.wait([probe], timeout=0)
        if not ready:
            return False
        try:
            ray.get(probe)
        except ray.exceptions.RayError:
            self._down[worker] = None  # still restarting: probe again
            return False
        self._down.pop(worker, None)
        return True

    def _wait_healthy(self, worker: int) -> bool:
        deadline = time.monotonic() + WORKER_RESTART_TIMEOUT_S
        while not self._healthy(worker):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def rollout(
        self, task_indices: list[int], *, group_size: int, seed: int, training_step: int | None = None
    ) -> list[TrajectoryGroup]:
        """Sync mode: one group per task, in order, task position p on worker p mod n. The
        requests a failing worker held come back as infrastructure-error groups.
        ``training_step`` reaches every env's reset, as in process."""
        ray = import_ray()
        workers = len(self.workers)
        ready = {
            worker: self._wait_healthy(worker) for worker in sorted({p % workers for p in range(len(task_indices))})
        }
        refs = [
            self._request(
                position % workers,
                task,
                [stream_seed(seed, position * group_size + j) for j in range(group_size)],
                training_step,
            )
            if ready[position % workers]
            else None
            for position, task in enumerate(task_indices)
        ]
        groups = []
        for position, (task, ref) in enumerate(zip(task_indices, refs)):
            if ref is None:
                groups.append(
                    failed_group(
                        task,
                        group_size,
                        f"rollout worker {position % workers} did not come back within {WORKER_RESTART_TIMEOUT_S:g} s",
                    )
                )
                continue
            try:
                groups.append(ray.get(ref))
            except ray.exceptions.RayError as error:
                self._down.setdefault(position % workers, None)
                groups.append(failed_group(task, group_size, worker_error(error)))
        return groups

    def stream(
        self, next_task: Callable[[], int], *, group_size: int, batch: int, max_staleness: int, seed: int
    ) -> GroupStream:
        """Async mode: a stream of groups sampled ahead of the trainer (see GroupStream)."""
        base = stream_seed(derive_seed(seed, "async-rollouts"), self.weight_version)

        def submit(task: int, ordinal: int, version: int):
            while not (healthy := [w for w in range(len(self.workers)) if self._healthy(w)]):
                time.sleep(0.2)  # every worker is restarting
            worker = min(healthy, key=self._load.__getitem__)
            self._load[worker] += 1
            # The training step of a group sampled ahead is the weight version it is requested
            # under: the step whose weights sample it, as sync mode's step index is.
            future = self._request(
                worker, task, [stream_seed(base, ordinal * group_size + j) for j in range(group_size)], version
            ).future()
            future.add_done_callback(lambda future, worker=worker: self._done(worker, future))
            return future

        return GroupStream(
            submit,
            next_task,
            batch=batch,
            max_staleness=max_staleness,
            version=self.weight_version,
            on_error=lambda task, error: failed_group(task, group_size, worker_error(error)),
        )

    def _done(self, worker: int, future) -> None:
        self._load[worker] -= 1
        if not future.cancelled() and future.exception() is not None:
            self._down.setdefault(worker, None)

    def memory_state(self) -> list[list[dict[str, Any]]]:
        """Each worker's shared memory stores, in worker order (a checkpoint keeps them: with
        ``env.memory: shared`` the notes live in the workers, not in the trainer's process)."""
        ray = import_ray()
        states = []
        for ref in [worker.memory_state.remote() for worker in self.workers]:
            try:
                states.append(ray.get(ref))
            except (
                ray.exceptions.RayError
            ):  # a worker Ray is restarting lost its notes: the checkpoint goes on without them
                states.append([])
        return states

    def load_memory(self, states: list[list[dict[str, Any]]]) -> None:
        """Give worker i the stores :meth:`memory_state` saved for worker i. The stores are
        per worker, so a different worker count has no faithful mapping: ValueError."""
        if len(states) != len(self.workers):
            raise ValueError(
                f"it holds the memory stores of {len(states)} rollout worker(s) and this run has {len(self.workers)}; "
                f"resume with distributed.rollout_workers: {len(states)}"
            )
        ray = import_ray()
        ray.get([worker.load_memory.remote(state) for worker, state in zip(self.workers, states)])

    def info(self) -> list[dict[str, Any]]:
        """Each worker's process id, node and weight version."""
        ray = import_ray()
        return ray.get([worker.info.remote() for worker in self.workers])

    def close(self) -> None:
        ray = import_ray()
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []
        if self._owns_ray:
            ray.shutdown()


class RolloutsOnRankZero(SharedWeights):
    """What trainer ranks other than 0 hold in place of the rollout workers: rank 0 asks the
    workers and broadcasts the groups; the weight version is counted in step with rank 0's
    (every rank calls ``sync_weights``: under FSDP2 gathering the full weights is collective)."""

    interface = "tokens"
    separate_weights = True


def worker_error(error: BaseException) -> str:
    """One line for a failed rollout request (the trajectory's infra_error)."""
    text = str(error).strip().splitlines()
    return f"rollout worker failed: {type(error).__name__}: {text[0] if text else ''}"[:500]

"""Staleness-bounded asynchronous rollouts: a stream of trajectory groups that keeps
sampling while the trainer updates.

Groups are requested one task at a time from rollout workers and handed to the trainer in
the order they finish (a slow episode holds back its own group only, never the step).
Admission bounds how far sampling runs ahead of training, as AReaL does: at trainer
version v (v - v0 updates done since the stream began) at most ``(v - v0 + s + 1) * batch``
groups are consumed, ready or in flight, so a group requested at version v is consumed by
version v + s unless slower groups overtake it. A group's staleness is the trainer
version minus the oldest weight version among its tokens (partial rollouts continue with
newer weights, but their first tokens keep the version they were sampled by); a group
staler than ``s`` is dropped and counted, and a replacement is requested.

Pure Python over ``concurrent.futures.Future`` (Ray's ``ObjectRef.future()``), so the
bookkeeping is tested with threads and scripted groups.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait

from agentic_rl.types import TrajectoryGroup

Submit = Callable[[int, int, int], Future]
"""``submit(task_index, ordinal, version) -> Future[TrajectoryGroup]``: request one group; the
ordinal numbers the stream's groups (its random streams), ``version`` is the trainer's."""


def group_staleness(group: TrajectoryGroup, version: int) -> int:
    """``version`` minus the oldest weight version that sampled any of ``group``'s tokens
    (0 for a group with no sampled turn, e.g. all infrastructure errors)."""
    versions = [v for t in group.trajectories for v in t.weight_versions]
    return max(version - min(versions), 0) if versions else 0


class GroupStream:
    """Groups for the trainer, sampled ahead by at most ``max_staleness`` versions.

    ``submit``: requests one group (see :data:`Submit`); ``next_task``: the next task index
    to request; ``batch``: groups per step (``tasks_per_step``); ``version``: the trainer's
    weight version when the stream starts; ``on_error(task_index, error) -> group``: the
    group to hand over for a request that failed (its trajectories infra errors)."""

    def __init__(
        self,
        submit: Submit,
        next_task: Callable[[], int],
        *,
        batch: int,
        max_staleness: int,
        version: int,
        on_error: Callable[[int, BaseException], TrajectoryGroup],
    ) -> None:
        self.submit = submit
        self.next_task = next_task
        self.batch = batch
        self.max_staleness = max_staleness
        self.start_version = version
        self.on_error = on_error
        self.in_flight: dict[Future, int] = {}
        """Requested groups not yet finished, with their task index."""
        self.ready: list[TrajectoryGroup] = []
        self.consumed = 0
        self.ordinal = 0

    def _fill(self, version: int, needed: int) -> None:
        """Request groups up to the admission bound (and at least ``needed`` in flight)."""
        bound = (version - self.start_version + self.max_staleness + 1) * self.batch
        room = max(bound - self.consumed - len(self.ready) - len(self.in_flight), needed - len(self.in_flight))
        for _ in range(max(room, 0)):
            task = self.next_task()
            self.in_flight[self.submit(task, self.ordinal, version)] = task
            self.ordinal += 1

    def take(self, count: int, version: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        """The next ``count`` groups no staler than ``max_staleness`` at trainer ``version``
        (in the order they finished) and the metrics: groups dropped as stale
        (``stale_dropped``), failed requests (``rollout_failed_groups``), staleness mean,
        max and histogram (``staleness_k``: fraction of the groups with staleness k),
        trajectories sampled by several versions (``partial_rollout_frac``), seconds the
        trainer waited (``rollout_wait_s``) and groups still sampling when it stopped waiting
        (``groups_in_flight``: they run while the trainer updates)."""
        started = time.monotonic()
        dropped = failed = 0
        taken: list[TrajectoryGroup] = []
        staleness: list[int] = []
        while len(taken) < count:
            while self.ready and len(taken) < count:
                group = self.ready.pop(0)
                age = group_staleness(group, version)
                if age > self.max_staleness:
                    dropped += 1
                    continue
                taken.append(group)
                staleness.append(age)
            if len(taken) == count:
                break
            self._fill(version, count - len(taken))
            done, _ = wait(list(self.in_flight), return_when=FIRST_COMPLETED)
            for future in [f for f in self.in_flight if f in done]:  # finished together: in request order
                task = self.in_flight.pop(future)
                try:
                    self.ready.append(future.result())
                except Exception as error:  # a dead worker: its group is infrastructure errors
                    failed += 1
                    self.ready.append(self.on_error(task, error))
        self.consumed += len(taken)
        self._fill(version, 0)  # sampling continues while the trainer updates
        trajectories = [t for g in taken for t in g.trajectories]
        metrics = {
            "stale_dropped": float(dropped),
            "rollout_failed_groups": float(failed),
            "staleness_mean": sum(staleness) / max(len(staleness), 1),
            "staleness_max": float(max(staleness, default=0)),
            "partial_rollout_frac": sum(len(t.weight_versions) > 1 for t in trajectories) / max(len(trajectories), 1),
            "rollout_wait_s": time.monotonic() - started,
            "groups_in_flight": float(len(self.in_flight)),
        }
        for age in range(self.max_staleness + 1):
            metrics[f"staleness_{age}"] = staleness.count(age) / max(len(staleness), 1)
        return taken, metrics

    def cancel(self) -> None:
        """Forget the groups in flight (the run ends; their workers are stopped)."""
        for future in self.in_flight:
            future.cancel()
        self.in_flight.clear()

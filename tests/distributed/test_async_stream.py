"""GroupStream (distributed/async_stream.py): admission bounded by max_staleness, stale
groups dropped and counted, failed requests become infra groups, groups handed over in
the order they finish. Scripted groups on plain futures: no Ray, no model."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from agentic_rl.distributed.async_stream import GroupStream, group_staleness
from agentic_rl.types import Trajectory, TrajectoryGroup, Turn


def _group(task: int, versions: list[int]) -> TrajectoryGroup:
    group = TrajectoryGroup(task_id=str(task), group_id=f"g{task}")
    group.trajectories = [
        Trajectory(task_id=str(task), group_id=group.group_id, turns=[Turn("x", weight_version=v)]) for v in versions
    ]
    return group


class Workers:
    """Requests recorded as (task, ordinal, version). A request finishes at once (sampled
    at the version it was requested at, or ``versions[ordinal]``) unless its ordinal is in
    ``held``; held ones finish when the test says."""

    def __init__(self, held=(), versions=None) -> None:
        self.requests: list[tuple[int, int, int]] = []
        self.futures: list[Future] = []
        self.held = set(held)
        self.versions = versions or {}

        self.submitted = threading.Condition()

    def submit(self, task: int, ordinal: int, version: int) -> Future:
        future: Future = Future()
        with self.submitted:
            self.requests.append((task, ordinal, version))
            self.futures.append(future)
            self.submitted.notify_all()
        if ordinal not in self.held:
            self.finish(ordinal)
        return future

    def finish_once_requested(self, *ordinals: int, error: Exception | None = None) -> threading.Thread:
        """Finish (or fail) held requests from another thread as soon as they have been made:
        a fixed delay raced the stream's submissions on a loaded machine."""

        def run() -> None:
            with self.submitted:
                assert self.submitted.wait_for(lambda: len(self.futures) > max(ordinals), timeout=30)
            for ordinal in ordinals:
                if error is None:
                    self.finish(ordinal)
                else:
                    self.futures[ordinal].set_exception(error)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def finish(self, index: int, versions: list[int] | None = None) -> None:
        task, _, version = self.requests[index]
        versions = versions if versions is not None else self.versions.get(index, [version, version])
        self.futures[index].set_result(_group(task, versions))


def _stream(workers: Workers, *, batch=2, max_staleness=1, version=0) -> GroupStream:
    tasks = iter(range(1000))
    return GroupStream(
        workers.submit,
        lambda: next(tasks),
        batch=batch,
        max_staleness=max_staleness,
        version=version,
        on_error=lambda task, error: _group(task, []),
    )


def test_group_staleness_uses_the_oldest_token_version() -> None:
    group = _group(0, [3, 5])
    group.trajectories[1].turns[0].version_changes = [(10, 6)]
    assert group_staleness(group, 6) == 3
    assert group_staleness(_group(0, []), 9) == 0  # nothing sampled (infra errors)


def test_admission_runs_ahead_by_max_staleness_steps() -> None:
    """s = 1, batch 2: the first take requests 2 x 2 groups; while step 0 trains, the two
    not taken keep sampling; after the update, the next take requests 2 more."""
    workers = Workers(held={2, 3})
    stream = _stream(workers)
    groups, metrics = stream.take(2, 0)
    assert [g.task_id for g in groups] == ["0", "1"]
    assert len(workers.requests) == 4 and metrics["groups_in_flight"] == 2
    assert all(version == 0 for _, _, version in workers.requests)
    workers.finish(2), workers.finish(3)
    groups, metrics = stream.take(2, 1)  # after one update
    assert [g.task_id for g in groups] == ["2", "3"]
    assert metrics["staleness_max"] == 1 and metrics["staleness_1"] == 1.0 and metrics["stale_dropped"] == 0
    assert [version for _, _, version in workers.requests[4:]] == [1, 1]  # requested at the new version
    assert [ordinal for _, ordinal, _ in workers.requests] == list(range(6))


def test_sync_bound_never_samples_ahead() -> None:
    """max_staleness 0: nothing is requested while the trainer updates."""
    workers = Workers(held={0, 1})
    stream = _stream(workers, max_staleness=0)
    workers.finish_once_requested(0, 1)
    groups, metrics = stream.take(2, 0)
    assert len(groups) == 2 and len(workers.requests) == 2 and metrics["groups_in_flight"] == 0
    assert metrics["staleness_0"] == 1.0


def test_groups_come_in_finishing_order_and_a_slow_one_does_not_block() -> None:
    workers = Workers(held={0, 2})  # groups 0 and 2 are slow
    stream = _stream(workers, batch=2, max_staleness=1)
    groups, _ = stream.take(2, 0)
    assert sorted(g.task_id for g in groups) == ["1", "3"]


def test_stale_groups_are_dropped_counted_and_replaced() -> None:
    """A group whose oldest tokens are 2 versions old is dropped at max_staleness 1; a new
    request replaces it."""
    workers = Workers(versions={0: [3, 7]})  # request 0: a partial rollout started at version 3
    stream = _stream(workers, batch=1, max_staleness=1, version=5)
    groups, metrics = stream.take(1, 5)
    assert [g.task_id for g in groups] == ["1"]
    assert metrics["stale_dropped"] == 1.0
    assert metrics["partial_rollout_frac"] == 0.0


def test_failed_request_becomes_an_infra_group() -> None:
    workers = Workers(held={0})
    stream = _stream(workers, batch=1, max_staleness=0)
    workers.finish_once_requested(0, error=RuntimeError("worker died"))
    groups, metrics = stream.take(1, 0)
    assert metrics["rollout_failed_groups"] == 1.0
    assert groups[0].task_id == "0" and groups[0].trajectories == []


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_staleness_never_exceeds_the_bound_over_many_steps(max_staleness: int) -> None:
    """Workers that finish requests in a scrambled order, the trainer updating between
    takes: every group handed over is within the bound."""
    workers = Workers(held=range(1000))
    stream = _stream(workers, batch=3, max_staleness=max_staleness)

    stop = threading.Event()

    def finish_pending() -> None:  # whatever the takes request, finished newest first: old requests are overtaken
        while not stop.wait(0.005):
            with workers.submitted:
                pending = [i for i, f in enumerate(workers.futures) if not f.done()]
            for i in reversed(pending):
                workers.finish(i)

    finisher = threading.Thread(target=finish_pending, daemon=True)
    finisher.start()
    try:
        results = [stream.take(3, version) for version in range(8)]
    finally:
        stop.set()
        finisher.join()
    for version, (groups, metrics) in enumerate(results):
        assert len(groups) == 3
        assert all(group_staleness(g, version) <= max_staleness for g in groups)
        assert metrics["staleness_max"] <= max_staleness

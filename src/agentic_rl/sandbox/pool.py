"""The warm pool of sandbox workers, and the one-call entry points.

A :class:`SandboxPool` keeps ``size`` warm workers
(:class:`~agentic_rl.sandbox.worker_process.SandboxWorker`, fork servers) and hands each
call to a free one, replacing a worker that died or hung. :func:`execute` runs one piece
of code (in a pool's worker, or in a worker started for the call); :func:`isolation` and
:func:`check_isolation` probe once what isolation a real worker achieves here."""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Mapping

from agentic_rl.sandbox.limits import ExecutionResult, Isolation, Limits, SandboxError
from agentic_rl.sandbox.policy import enforce
from agentic_rl.sandbox.worker_process import SandboxWorker


class SandboxPool:
    """``size`` warm workers; each call still runs in a fresh forked process.

    Thread-safe: ``execute`` blocks until a worker is free. A worker that dies or hangs
    is replaced on the next call."""

    def __init__(
        self, size: int = 2, *, limits: Limits | None = None, max_processes: int = 32, namespaces: bool = True
    ) -> None:
        if size < 1:
            raise ValueError(f"size: expected a positive int, got {size}")
        self.limits = limits or Limits()
        self._options = dict(memory_mb=self.limits.memory_mb, max_processes=max_processes, namespaces=namespaces)
        self._idle: queue.Queue[SandboxWorker] = queue.Queue()
        self._all: list[SandboxWorker] = []
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(size):
            worker = SandboxWorker(**self._options)
            self._all.append(worker)
            self._idle.put(worker)

    @property
    def isolation(self) -> Isolation:
        return self._all[0].isolation

    def execute(self, code: str, *, files: Mapping[str, str | bytes] | None = None, **overrides) -> ExecutionResult:
        if self._closed:
            raise SandboxError("the pool is closed")
        limits = Limits(**{**self.limits.__dict__, **overrides})
        worker = self._idle.get()
        try:
            if worker.dead:
                worker = self._replace(worker)
            return worker.run(code, limits, files)
        finally:
            self._idle.put(worker)

    def _replace(self, worker: SandboxWorker) -> SandboxWorker:
        worker.close()
        fresh = SandboxWorker(**self._options)
        with self._lock:
            self._all = [fresh if w is worker else w for w in self._all]
        return fresh

    def close(self) -> None:
        self._closed = True
        with self._lock:
            for worker in self._all:
                worker.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def execute(
    code: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    max_output_bytes: int = 65536,
    files: Mapping[str, str | bytes] | None = None,
    pool: SandboxPool | None = None,
    **limits,
) -> ExecutionResult:
    """Run ``code`` (Python source) in a fresh sandboxed process and return what happened.

    Without ``pool`` a worker is started and stopped for this call (an interpreter start);
    with one, a warm worker forks a fresh child (milliseconds). ``files`` maps relative
    paths to contents placed in the private working directory first."""
    if pool is not None:
        return pool.execute(
            code, files=files, timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=max_output_bytes, **limits
        )
    config = Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=max_output_bytes, **limits)
    try:
        worker = SandboxWorker(memory_mb=memory_mb)
    except (SandboxError, OSError) as error:
        return ExecutionResult(status="killed", stderr=f"sandbox failed to start: {error}", infra_error=True)
    try:
        return worker.run(code, config, files)
    finally:
        worker.close()


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Which isolation features are active here: probed once, by starting a real worker
    and reporting what it actually achieved."""
    try:
        worker = SandboxWorker(isolation="report")
    except (SandboxError, OSError) as error:
        return Isolation(notes=[f"sandbox worker failed to start: {error}"])
    try:
        return worker.isolation
    finally:
        worker.close()


def check_isolation(mode: str | None = None) -> Isolation:
    """At the start of a run that uses the sandbox: the verified isolation, after
    ``policy.enforce`` (raises ``IsolationUnavailable`` under ``required``, warns once,
    naming what is missing, under ``best-effort``)."""
    info = isolation()
    enforce(info, mode)
    return info

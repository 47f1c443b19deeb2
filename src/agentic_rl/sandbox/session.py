"""Stateful Python sessions: variables persist across calls within one trajectory.

A session owns one worker whose child process stays alive between calls (the notebook
loop). Sessions are isolated from each other (separate processes, namespaces and work
directories) and are released by :meth:`PythonSession.close` (the env calls it when the
trajectory ends), by garbage collection, or at interpreter exit. If a call times out or
crashes the process, the next call starts a fresh one and says that the state was lost.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

from agentic_rl.sandbox.limits import ExecutionResult, Limits, SandboxError
from agentic_rl.sandbox.worker_process import SandboxWorker


class PythonSession:
    """A persistent Python namespace in a sandbox. Thread-safe (calls are serialised)."""

    def __init__(self, limits: Limits | None = None, *, max_processes: int = 32) -> None:
        self.limits = limits or Limits()
        self._max_processes = max_processes
        self._worker: SandboxWorker | None = None
        self._lock = threading.Lock()
        self._finalizer = None
        self.closed = False

    def _ensure(self) -> SandboxWorker:
        if self._worker is None or self._worker.dead:
            if self._worker is not None:
                self._worker.close()
            self._worker = SandboxWorker(memory_mb=self.limits.memory_mb, max_processes=self._max_processes)
            self._finalizer = weakref.finalize(self, SandboxWorker.close, self._worker)
        return self._worker

    def run(self, code: str, *, files: Mapping[str, str | bytes] | None = None, **overrides) -> ExecutionResult:
        """Execute one cell; never raises (a sandbox failure is ``infra_error``)."""
        limits = Limits(**{**self.limits.__dict__, **overrides})
        with self._lock:
            if self.closed:
                return ExecutionResult(status="killed", stderr="the session is closed", infra_error=True)
            try:
                lost = self._worker is not None and self._worker.dead
                result = self._ensure().run(code, limits, files, keep=True)
                result.restarted = result.restarted or lost
                return result
            except (SandboxError, OSError) as error:
                return ExecutionResult(status="killed", stderr=f"sandbox failed: {error}", infra_error=True)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._finalizer is not None:
                self._finalizer()  # closes the worker once
            self._worker = None

    def __enter__(self) -> PythonSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

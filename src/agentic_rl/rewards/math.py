"""Math answers: the gold answer of a GSM8K-style solution, and mathematical equivalence."""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time

from agentic_rl.rewards.outcome import normalize_number, numeric_match

__all__ = ["MathVerifier", "gold_answer", "math_equivalent"]

DEFAULT_TIMEOUT_S = 1.5
"""Deadline of one math-verify comparison in the worker; past it the answer is scored
not equivalent and the worker is killed and restarted, all within 2 s."""
DEFAULT_MEMORY_BYTES = 2 << 30
"""RLIMIT_AS of the worker process (address space, after sympy is imported)."""
MAX_ANSWER_CHARS = 10_000
"""Longer answers are not equivalent without being parsed (no real answer is this long)."""


def gold_answer(text: str) -> str:
    """The final answer of a gold solution: the part after GSM8K's ``####`` if present."""
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip().replace(",", "")


class MathVerifier:
    """math-verify comparisons in a long-lived worker process, each with a deadline.

    sympy can spend unbounded time and memory on a model's answer (``9^{9^{9^{9}}}``)
    while holding the GIL, so no thread of the trainer could interrupt it: the parsing
    runs in a child process (``agentic_rl.rewards._math_worker``) capped by RLIMIT_AS,
    and a comparison that misses ``timeout_s`` kills the child and counts as not
    equivalent; the next call starts a fresh one. Thread-safe (comparisons are
    serialized: each takes about a millisecond). The child dies with the trainer
    (atexit, stdin EOF, a parent watch) and is restarted after a fork.
    """

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        startup_timeout_s: float = 120.0,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self.startup_timeout_s = startup_timeout_s
        self.available = True
        """False once the worker reported that math-verify is not installed."""
        self.restarts = 0
        """Workers killed or found dead (timeouts and crashes)."""
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._pid = os.getpid()
        self._buffer = b""
        self._ready = False
        atexit.register(self.close)

    def _spawn(self) -> None:
        """Start a worker without waiting for it: it imports sympy while the trainer works."""
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "agentic_rl.rewards._math_worker", str(self.memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self._buffer = b""
        self._ready = False

    def _wait_ready(self) -> None:
        status = self._read_line(self.startup_timeout_s)
        if status == "unavailable":
            self.available = False
            self._kill()
        elif status != "ready":
            self._kill()
            raise RuntimeError(
                f"the math-verify worker did not start within {self.startup_timeout_s:.0f} s (got {status!r})"
            )
        else:
            self._ready = True

    def _read_line(self, timeout_s: float) -> str | None:
        """One line from the worker, or None on deadline or EOF."""
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def equivalent(self, prediction: str, gold: str) -> bool:
        """math-verify's verdict on the pair; False on deadline, crash or unparsable input."""
        if len(prediction) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
            return False
        request = (json.dumps([prediction, gold]) + "\n").encode()
        with self._lock:
            if self._pid != os.getpid():  # forked: the pipes belong to the parent's worker
                self._process, self._pid = None, os.getpid()
            if self._process is not None and self._process.poll() is not None:
                self.restarts += 1  # crashed while idle: start a fresh one
                self._kill()
            if self._process is None:
                if not self.available:
                    return False
                self._spawn()
            if not self._ready:
                self._wait_ready()
                if self._process is None:
                    return False
            try:
                self._process.stdin.write(request)
                self._process.stdin.flush()
            except OSError:
                self.restarts += 1
                self._kill()
                return False
            answer = self._read_line(self.timeout_s)
            if answer not in ("0", "1"):  # deadline or crash on this answer
                self.restarts += 1
                self._kill()
                self._spawn()  # the replacement starts up while the trainer goes on
                return False
            return answer == "1"

    def close(self) -> None:
        """Stop the worker (a later call starts a new one)."""
        with self._lock:
            if self._pid == os.getpid():
                self._kill()


_VERIFIER: MathVerifier | None = None
_VERIFIER_LOCK = threading.Lock()


def math_verifier() -> MathVerifier:
    """The process-wide :class:`MathVerifier` used by :func:`math_equivalent`."""
    global _VERIFIER
    with _VERIFIER_LOCK:
        if _VERIFIER is None:
            _VERIFIER = MathVerifier()
        return _VERIFIER


def math_equivalent(prediction: str | None, gold: str) -> bool:
    """True when ``prediction`` equals ``gold`` mathematically.

    Plain numbers that match, identical strings and two different integers are decided
    here (no process round trip on the common GSM8K path); anything else goes to
    math-verify in a worker process with a deadline and a memory cap (see
    :class:`MathVerifier`), so a hostile answer is scored not equivalent instead of
    freezing the trainer. Without math-verify installed only the numeric check applies.
    """
    if prediction is None or not prediction.strip():
        return False
    if numeric_match(prediction, gold) or prediction.strip() == gold.strip():
        return True
    predicted, expected = normalize_number(prediction), normalize_number(gold)
    if predicted is not None and expected is not None and predicted.denominator == expected.denominator == 1:
        return False  # two different integers (most wrong GSM8K answers): no round trip needed
    return math_verifier().equivalent(prediction, gold)

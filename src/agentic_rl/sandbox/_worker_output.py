"""The worker's reading of one call's child: its output, its status line, its outcome.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). The ``Worker`` (``_worker_server``) hands a call's
child here: :func:`pump` collects the child's stdout and stderr with a cap while it runs
(ending it on timeout, output limit, CPU budget or a forged status line), :func:`capped`
cuts the output to the limit, and :func:`call_status` turns what happened into the
call's (status, exit code). These judge the child only; the ``Worker`` decides what to kill.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from _worker_cpu import tree_cpu_s

READ_SIZE = 1 << 16
CPU_CHECK_S = 0.25
"""How often a session cell's CPU time is counted (``pump``)."""


def close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def drain(chunks: dict, limit: int) -> None:
    """Read what is already in the pipes (non-blocking), up to just past ``limit`` per pipe."""
    for fd, buf in chunks.items():
        while len(buf) <= limit:
            try:
                data = os.read(fd, READ_SIZE)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            buf += data


OUTCOMES = ("ok", "error", "memory")
STATUS_LINE_MAX = 4096
GARBAGE = "sandbox: the code wrote to the sandbox's status descriptor; the process was stopped"


def parse_status(line: bytes, cell: int) -> str | None:
    """The outcome of a status line the child's cell loop wrote for ``cell``; None for anything else."""
    try:
        report = json.loads(line)
    except ValueError:
        return None
    if isinstance(report, dict) and report.get("outcome") in OUTCOMES and report.get("cell") == cell:
        return report["outcome"]
    return None


def pump(
    child: dict,
    chunks: dict,
    deadline: float,
    limit: int,
    cell: int,
    cpu_budget: tuple[float, float, int | None] | None = None,
) -> tuple[str | None, str | None, int | None]:
    """Collect the child's output into ``chunks`` until its cell finishes, it exits, the
    output exceeds ``limit`` or the deadline passes: (outcome, kill_reason, exit status).

    ``outcome`` is the cell's own report ("ok" / "error" / "memory"), None when it sent none.
    The status pipe is writable by the code too: anything but the expected line for
    ``cell`` is kill reason "garbage" (the cell's error, never the worker's).
    ``cpu_budget``: (the call's CPU seconds when the cell started, seconds it may use, the
    zygote's pid; see ``tree_cpu_s``): the worker counts a session cell's CPU time itself,
    every process of the call included, and ends a cell past its budget as a timeout (a
    backstop behind the RLIMIT_CPU it sets, which counts the session child alone).
    """
    pid = child["pid"]
    status_buf = b""
    exit_status = None
    open_fds = {child["out"], child["err"], child["status"]}
    checked = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= deadline:
            return None, "timeout", exit_status
        if cpu_budget is not None and exit_status is None and now - checked >= CPU_CHECK_S:
            checked = now
            if tree_cpu_s(cpu_budget[2]) - cpu_budget[0] > cpu_budget[1]:
                return None, "timeout", exit_status
        try:
            ready, _, _ = select.select(list(open_fds), [], [], min(0.05, deadline - now) if exit_status is None else 0)
        except InterruptedError:
            continue
        for fd in ready:
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                open_fds.discard(fd)
                continue
            if fd == child["status"]:
                status_buf += data
            else:
                chunks[fd] += data
        if len(chunks[child["out"]]) + len(chunks[child["err"]]) > limit:
            return None, "output_limit", exit_status
        if b"\n" in status_buf or len(status_buf) > STATUS_LINE_MAX:
            # Collect what is already in the pipes, then finish the cell.
            drain(chunks, limit)
            line, _, rest = status_buf.partition(b"\n")
            child["status_rest"] = rest  # more than one line: the code wrote there too (checked before the next cell)
            outcome = parse_status(line, cell) if len(line) <= STATUS_LINE_MAX else None
            return (outcome, None, exit_status) if outcome is not None else (None, "garbage", exit_status)
        if exit_status is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exit_status = status
                continue  # one more non-blocking pass to drain the pipes
        elif not ready:
            return None, None, exit_status


def status_pending(child: dict) -> bool:
    """Whether the child's status pipe holds anything before a cell was sent to it."""
    if child.pop("status_rest", b""):
        return True
    try:
        ready, _, _ = select.select([child["status"]], [], [], 0)
    except (InterruptedError, OSError, ValueError):
        return False
    if not ready:
        return False
    try:
        return bool(os.read(child["status"], READ_SIZE))
    except (BlockingIOError, OSError):
        return False


def capped(stdout: bytes, stderr: bytes, limit: int) -> tuple[bytes, bytes, bool]:
    """At most ``limit`` bytes in all, stdout first: (stdout, stderr, truncated)."""
    truncated = len(stdout) + len(stderr) > limit
    if truncated:
        keep_out = min(len(stdout), limit)
        stdout, stderr = stdout[:keep_out], stderr[: max(0, limit - keep_out)]
    return stdout, stderr, truncated


def call_status(kill_reason: str | None, outcome: str | None, exit_status: int | None, oom) -> tuple[str, int | None]:
    """The call's (status, exit_code); ``oom()`` tells a memory kill from another SIGKILL."""
    if kill_reason == "garbage":
        return "error", None
    if kill_reason:
        return kill_reason, None
    if outcome is not None:
        return {"ok": "ok", "error": "error", "memory": "memory"}[outcome], 0 if outcome == "ok" else 1
    if exit_status is None:
        return "killed", None
    exit_code = os.waitstatus_to_exitcode(exit_status)
    if exit_code == 0:
        return "ok", exit_code
    if exit_code > 0:
        return "error", exit_code
    if -exit_code == signal.SIGXCPU:
        return "timeout", exit_code
    if -exit_code == signal.SIGKILL:
        return ("memory" if oom() else "killed"), exit_code
    return "error", exit_code

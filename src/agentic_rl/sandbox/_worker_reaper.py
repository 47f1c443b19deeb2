"""Killing and reaping what a call left behind, from inside the sandbox worker.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package).
"""

from __future__ import annotations

import os
import signal
import time

from _worker_cpu import descendants, process_table


def kill_group(pid: int) -> None:
    """SIGKILL the call's process group and its leader (which may have left the group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def reap() -> None:
    """Collect every exited child without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _others(spare: int | None) -> list[int]:
    """Every process of the worker's PID namespace but the worker (1) and ``spare``."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in (1, spare)]
    except OSError:
        return []


def _children() -> list[int]:
    """Live children of the worker (the worker is single-threaded: one task)."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as handle:
            return [int(pid) for pid in handle.read().split()]
    except OSError:
        return []


def _kill_pid_namespace(spare: int | None) -> None:
    # The worker is init of its own PID namespace: every other process in it, but the
    # zygote (``spare``), is the sandbox's. Stopped first, so none forks while the rest die.
    for _ in range(500):
        others = _others(spare)
        if not others:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in others:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        reap()
        time.sleep(0.001)


def _kill_children(spare: int | None) -> None:
    # The worker is a child subreaper: orphans of the call (setsid'd daemons) are
    # re-parented to it, so killing its children until none is left reaches them
    # even without a PID namespace or cgroups.
    for _ in range(500):
        reap()
        children = [pid for pid in _children() if pid != spare]
        if not children:
            break
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


def read_cgroup_file(dir_fd: int, name: str) -> str:
    """A file of the worker's cgroup, through the dir fd opened before /sys was hidden."""
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks).decode()
            chunks.append(chunk)
    finally:
        os.close(fd)


def _kill_cgroup(cgroups: dict, spare: int | None) -> None:
    """Kill every member but the worker and ``spare`` of the first of the pids / memory cgroups the worker has."""
    for controller in ("pids", "memory"):
        dir_fd = cgroups.get(controller)
        if dir_fd is None:
            continue
        me = os.getpid()
        for _ in range(1000):
            try:
                pids = [int(p) for p in read_cgroup_file(dir_fd, "cgroup.procs").split() if int(p) not in (me, spare)]
            except OSError:
                break
            if not pids:
                break
            for other in pids:
                try:
                    os.kill(other, signal.SIGKILL)
                except OSError:
                    pass
            reap()
            time.sleep(0.002)
        break


def freeze(spare: int | None) -> bool:
    """Stop every process of the call (SIGSTOP, which no process can catch or ignore) until
    none runs: between a session's cells nothing the code started runs, burns CPU or waits
    out a wall clock. False when processes kept appearing (the caller then kills them)."""
    for _ in range(200):
        table = process_table()
        running = [pid for pid in descendants(spare, table) if table[pid][1] not in "TtZX"]
        if not running:
            return True
        for pid in running:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        time.sleep(0.0005)
    return False


def thaw(spare: int | None) -> None:
    """Let the call's processes run again (before a session's next cell)."""
    for pid in descendants(spare):
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


def kill_leftovers(pid_ns: bool, cgroups: dict, spare: int | None = None) -> None:
    """Kill everything the call left behind (daemons, setsid'd grandchildren), sparing the
    zygote (``spare``, whose pid the worker knows: its own child, which never runs code)."""
    if pid_ns:
        _kill_pid_namespace(spare)
    else:
        _kill_children(spare)
    _kill_cgroup(cgroups, spare)
    reap()


def oom_seen(cgroups: dict) -> bool:
    """Whether the memory cgroup has ever hit its limit (tells an OOM kill from another SIGKILL)."""
    dir_fd = cgroups.get("memory")
    if dir_fd is None:
        return False
    try:
        return int(read_cgroup_file(dir_fd, "memory.failcnt").strip() or 0) > 0
    except OSError:
        pass
    try:  # cgroup v2
        events = dict(line.split() for line in read_cgroup_file(dir_fd, "memory.events").splitlines() if line.strip())
        return int(events.get("oom_kill", 0)) > 0 or int(events.get("max", 0)) > 0
    except (OSError, ValueError):
        return False

"""What runs in a call's forked child: limits, privileges, then a loop running cells.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). Everything here runs after ``fork`` in the child that
then executes the untrusted code.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import signal
import sys

# Imported before the uid drop: without a mount namespace the stdlib may be unreadable to the
# sandbox uid (an interpreter under a 0700 /root); error tracebacks and exec must still work.
import traceback
import warnings  # noqa: F401 -- os.execvp imports it

import _worker_seccomp
from _worker_isolation import drop_privileges, new_ipc_namespace

MB = 1024 * 1024
CONTROL_FD, STATUS_FD = 3, 4
"""The child reads cells (one JSON line each) on fd 3 and answers each cell's outcome on fd 4."""


def _redirect_fds(out_w: int, err_w: int, ctl_r: int, st_w: int) -> None:
    """stdin from /dev/null, stdout / stderr / control / status on fds 1-4, nothing else open."""
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(ctl_r, CONTROL_FD)
    os.dup2(st_w, STATUS_FD)
    os.closerange(5, 65536)


def _set_limits(request: dict, nproc: int | None) -> None:
    cpu = int(request["cpu_s"]) + 1
    # A session child renews its soft limit per cell (``_renew_cpu_limit``) under a hard
    # limit for the whole session (raising a hard limit needs CAP_SYS_RESOURCE, which
    # neither the code nor, in a container or a user namespace, the worker has).
    cpu_hard = max(cpu + 2, int(request["session_cpu_s"])) if request.get("keep") else cpu + 2
    limits = [
        (resource.RLIMIT_CPU, (cpu, cpu_hard)),
        (resource.RLIMIT_AS, (request["memory_mb"] * MB,) * 2),
        (resource.RLIMIT_FSIZE, (request["file_size_mb"] * MB,) * 2),
        (resource.RLIMIT_NOFILE, (request["open_files"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if nproc:
        limits.append((resource.RLIMIT_NPROC, (nproc,) * 2))
    for which, value in limits:
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError):
            pass


def _scrub_environment() -> None:
    """Only a fixed environment (the work dir as home and temp dir); fresh std streams on fds 0-2."""
    os.environ.clear()
    # USER / LOGNAME: the worker's uid has no passwd entry, and getpass.getuser() (which
    # libraries call for cache dirs) reads them before it asks pwd.
    os.environ.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": os.getcwd(),
            "TMPDIR": os.getcwd(),
            "USER": "sandbox",
            "LOGNAME": "sandbox",
        }
    )
    import io

    sys.stdin = open(0, closefd=False)
    sys.stdout = io.TextIOWrapper(
        open(1, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.stderr = io.TextIOWrapper(
        open(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )


def prepare_child(
    request: dict,
    fds: tuple[int, int, int, int],
    workdir: str,
    nproc: int | None,
    drop: bool,
    uid: int | None,
    own_ipc: bool,
    seccomp: bool,
) -> None:
    """Turn the freshly forked process into the call's sandboxed child (before any user code).

    ``fds``: the child's ends of the (stdout, stderr, control, status) pipes. Limits are
    set while still privileged (hard limits can then never be raised), then the call gets
    its own IPC namespace (``own_ipc``: when the worker has none of its own to clean after
    each call), drops to ``uid`` without capabilities and, where the worker's probe
    verified it (``seccomp``), installs the syscall filter (``_worker_seccomp``).
    """
    os.setsid()
    _redirect_fds(*fds)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(workdir)
    _set_limits(request, nproc)
    if own_ipc:
        new_ipc_namespace()  # verified at worker start (``ipc_ns`` in its report)
    if drop:
        drop_privileges(uid)
    if seccomp:
        _worker_seccomp.install()  # fails closed: an error here ends the child before any code
    _scrub_environment()


def _renew_cpu_limit(cpu_s: float) -> None:
    """RLIMIT_CPU counts the process's whole life: each cell of a session gets ``cpu_s`` anew
    (the CPU time used so far plus its budget), so the 6th one-second cell is not killed
    for the first five. Code that raises its own soft limit still meets the worker's count
    of the cell's CPU time and the session's hard limit."""
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    times = os.times()
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (min(int(times.user + times.system + cpu_s) + 1, hard), hard))
    except (ValueError, OSError):
        pass


def _run_cell(code: str, namespace: dict) -> tuple[str, int | None]:
    """Execute one cell in ``namespace``: (outcome, exit code for a ``SystemExit``)."""
    outcome = "ok"
    exit_code = None
    try:
        exec(compile(code, "<sandbox>", "exec"), namespace)
    except SystemExit as stop:
        outcome = "exit"
        exit_code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except MemoryError:
        outcome = "memory"
        sys.stderr.write("MemoryError\n")
    except BaseException:
        outcome = "error"
        try:
            kind, value, trace = sys.exc_info()
            # Skip this function's own frame: the model sees only its code.
            traceback.print_exception(kind, value, trace.tb_next if trace is not None else None)
        except BaseException:
            sys.stderr.write("error while printing the traceback\n")
    return outcome, exit_code


def serve_cells() -> None:
    """Run cells from the control fd until it closes or a cell exits; never returns."""
    # The builtins module itself, as a script's __main__ sees it (an imported module's
    # __builtins__ is the module's dict instead).
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    control = os.fdopen(CONTROL_FD, "rb", buffering=0)
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = control.read(65536)
            if not chunk:
                os._exit(0)
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        try:
            cell = json.loads(line)
            code, cell_id = cell["code"], cell.get("cell")
            _renew_cpu_limit(float(cell["cpu_s"]))
        except (ValueError, TypeError, KeyError):
            # Something other than the worker wrote here (the code itself, through a
            # descriptor it reopened): an error for this cell, never a crash.
            code, cell_id = "raise RuntimeError('sandbox: unreadable request on the control descriptor')", None
        outcome, exit_code = _run_cell(code, namespace)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        if outcome == "exit":
            os._exit(exit_code & 0xFF)
        os.write(STATUS_FD, (json.dumps({"outcome": outcome, "cell": cell_id}) + "\n").encode())

"""The sandbox worker: a small fork server that runs untrusted Python code.

Run as a script (stdlib only, so it starts fast): ``python -I _worker.py CONFIG_JSON``.
The parent talks to it with one JSON object per line on stdin/stdout. At start the worker
sets up what its process can (mount namespace view, cgroup membership) and reports what
it actually achieved; each ``run`` request forks a fresh child (``keep`` requests reuse a
persistent child: a stateful session), drains its output with a cap, enforces the wall
timeout by killing the child's process group, and then kills every process the call
left behind (the whole PID namespace when the worker is its init, else the cgroup).

This script is the entry point and the protocol loop; the rest are helper scripts beside
it: ``_worker_server`` (the ``Worker``: a call's lifecycle), ``_worker_isolation`` (mounts,
cgroups, capabilities), ``_worker_child`` (the forked child: limits, privileges, the cell
loop) and ``_worker_reaper`` (killing and reaping what a call left behind).
"""

from __future__ import annotations

import json
import os
import signal
import sys

# ``-I`` leaves this script's directory off sys.path. The helpers are imported from it
# directly, as plain scripts: importing them through the agentic_rl package would run the
# package's __init__ (slow, and far more than the stdlib in the sandboxed process). Unlike
# this script they are modules, so their compiled byte code is cached in __pycache__ like
# any package module's; ``-B`` is lifted for these imports only (compiling them at every
# start would cost more than the split saves), and the sandboxed code still runs under it.
# The directory comes off sys.path again so the code the worker runs sees the same sys.path.
_HERE = os.path.dirname(os.path.abspath(__file__))
_NO_BYTECODE = sys.dont_write_bytecode
sys.path.insert(0, _HERE)
sys.dont_write_bytecode = False
try:
    from _worker_server import Worker
finally:
    sys.path.remove(_HERE)
    sys.dont_write_bytecode = _NO_BYTECODE


def _handle(worker: Worker, request: dict) -> dict:
    op = request.get("op")
    if op == "run":
        try:
            return worker.run(request)
        except Exception as error:
            stderr = f"sandbox worker error: {type(error).__name__}: {error}"
            return {
                "status": "killed",
                "stdout": "",
                "stderr": stderr,
                "exit_code": None,
                "duration_s": 0.0,
                "truncated": False,
                "infra_error": True,
            }
    if op == "reset":
        worker.stop_session()
    return {"ok": True}


def main() -> None:
    config = json.loads(sys.argv[1])
    # Signals aimed at the worker by the code it runs must not stop it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    worker = Worker(config)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing but protocol lines reach the parent
    sys.stdout = open(os.devnull, "w")
    try:
        worker.setup()
        out.write(json.dumps({"ready": True, **worker.report}) + "\n")
    except Exception as error:  # report, then exit
        out.write(json.dumps({"ready": False, "error": f"{type(error).__name__}: {error}"}) + "\n")
        return
    for line in sys.stdin:
        out.write(json.dumps(_handle(worker, json.loads(line))) + "\n")
    worker.stop_session()


if __name__ == "__main__":
    main()

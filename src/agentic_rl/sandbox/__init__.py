"""Process sandbox for model-written Python code.

``execute(code, timeout_s=..., memory_mb=..., max_output_bytes=...)`` runs code in a fresh
process with rlimits, a private temporary work dir, a scrubbed environment, an outside wall
timeout and capped output; network, PID and mount namespaces and cgroups are added where
the kernel allows (``isolation()`` says which are active), and as root the code runs as
an unprivileged uid of its worker's own (``sandbox/uids.py``) in an empty box. ``sandbox.isolation`` (``set_isolation_mode``: required,
best-effort, auto) decides whether a sandbox lacking any of that may run at all.
``SandboxPool`` keeps warm fork-server workers; ``PythonSession`` keeps variables across calls.
"""

from agentic_rl.sandbox.limits import STATUSES, ExecutionResult, Isolation, Limits, SandboxError
from agentic_rl.sandbox.policy import IsolationUnavailable, isolation_mode, set_isolation_mode
from agentic_rl.sandbox.pool import SandboxPool, check_isolation, execute, isolation
from agentic_rl.sandbox.session import PythonSession
from agentic_rl.sandbox.visibility import hide_path
from agentic_rl.sandbox.worker_process import SandboxWorker

__all__ = [
    "STATUSES",
    "ExecutionResult",
    "Isolation",
    "IsolationUnavailable",
    "Limits",
    "PythonSession",
    "SandboxError",
    "SandboxPool",
    "SandboxWorker",
    "check_isolation",
    "execute",
    "hide_path",
    "isolation",
    "isolation_mode",
    "set_isolation_mode",
]

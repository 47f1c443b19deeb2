"""Process sandbox for model-written Python code.

``execute(code, timeout_s=..., memory_mb=..., max_output_bytes=...)`` runs code in a fresh
process with rlimits, a private temporary work dir, a scrubbed environment, an outside wall
timeout and capped output; network, PID and mount namespaces and cgroups are added where
the kernel allows (``isolation()`` says which are active). ``SandboxPool`` keeps warm
fork-server workers; ``PythonSession`` keeps variables across calls.
"""

from agentic_rl.sandbox.limits import STATUSES, ExecutionResult, Isolation, Limits
from agentic_rl.sandbox.pool import SandboxError, SandboxPool, SandboxWorker, execute, isolation
from agentic_rl.sandbox.session import PythonSession

__all__ = ["STATUSES", "ExecutionResult", "Isolation", "Limits", "PythonSession", "SandboxError", "SandboxPool", "SandboxWorker", "execute", "isolation"]

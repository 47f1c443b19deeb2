"""``sandbox.isolation``: what a run demands of the sandbox, and no silent fallback.

``required`` refuses to start a sandbox that lacks any of :data:`REQUIRED` (one line naming
the setting and what is missing); ``best-effort`` runs with what the machine offers and
warns once, naming exactly what is missing; ``auto`` (the default) is ``required`` where
namespaces work here and ``best-effort`` elsewhere (with the warning). The environment
variable ``AGENTIC_RL_SANDBOX_ISOLATION`` sets the default for processes that read no config.
"""

from __future__ import annotations

import os
import warnings

from agentic_rl.sandbox.limits import Isolation, SandboxError, unshare_prefix

MODES = ("auto", "required", "best-effort")
REQUIRED = (
    "net_ns",
    "pid_ns",
    "mount_ns",
    "ipc_ns",
    "unprivileged",
    "caps_dropped",
    "readonly_root",
    "private_workdir",
    "proc_masked",
    "sys_hidden",
    "private_dev",
    "homes_hidden",
    "allowlist_root",
    "seccomp",
)
"""An unprivileged nobody in an empty box: what ``required`` demands (plus a process bound:
the pids cgroup or RLIMIT_NPROC under a non-root uid)."""

_mode: str | None = None
_warned: set[str] = set()


class IsolationUnavailable(SandboxError):
    """``sandbox.isolation: required`` and the machine cannot provide it."""


def set_isolation_mode(mode: str | None) -> None:
    """Set the mode for this process (None: back to the environment variable / auto)."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"sandbox.isolation: expected one of {', '.join(MODES)}, got {mode!r}")
    global _mode
    _mode = mode


def isolation_mode() -> str:
    """The resolved mode: ``required`` or ``best-effort``."""
    mode = _mode or os.environ.get("AGENTIC_RL_SANDBOX_ISOLATION") or "auto"
    if mode not in MODES:
        raise ValueError(f"AGENTIC_RL_SANDBOX_ISOLATION: expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "auto":
        return "required" if unshare_prefix()[0] else "best-effort"
    return mode


def missing(info: Isolation) -> list[str]:
    """What of :data:`REQUIRED` is not active (verified) in ``info``."""
    gone = [name for name in REQUIRED if not getattr(info, name)]
    if not (info.cgroup_pids or info.rlimit_nproc):
        gone.append("process bound (cgroup_pids or rlimit_nproc)")
    return gone


def enforce(info: Isolation, mode: str | None = None) -> None:
    """Raise :class:`IsolationUnavailable` (``required``) or warn once (``best-effort``)
    when ``info`` lacks a required feature. ``mode``: None or ``auto`` resolve as the
    process's setting does."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"sandbox.isolation: expected one of {', '.join(MODES)}, got {mode!r}")
    mode = isolation_mode() if mode in (None, "auto") else mode
    gone = missing(info)
    if not gone:
        return
    notes = f"; {'; '.join(info.notes)}" if info.notes else ""
    if mode == "required":
        raise IsolationUnavailable(
            f"sandbox.isolation is 'required' but this machine's sandbox lacks {', '.join(gone)}{notes} (set sandbox.isolation: best-effort to run with {info.describe()})"
        )
    text = f"sandbox.isolation is 'best-effort': running without {', '.join(gone)}{notes}"
    if text not in _warned:
        _warned.add(text)
        warnings.warn(text, RuntimeWarning, stacklevel=3)

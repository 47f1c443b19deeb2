"""Sandbox limits, results, and the kernel probes (namespaces, cgroups) the workers build on."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field

STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed")
CGROUP_V1_ROOT = "/sys/fs/cgroup"


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start a worker)."""


@dataclass(frozen=True)
class Limits:
    """Per-call resource limits."""

    timeout_s: float = 10.0
    """Wall-clock limit, enforced from outside by killing the process group."""
    memory_mb: int = 512
    """Address-space limit of the process (RLIMIT_AS); also sizes the cgroup when one is used."""
    max_output_bytes: int = 65536
    """stdout + stderr beyond this are cut (status ``output_limit``, ``truncated``)."""
    cpu_s: float | None = None
    """CPU-time limit (RLIMIT_CPU); defaults to the wall timeout."""
    file_size_mb: int = 16
    """Largest file the code may write (RLIMIT_FSIZE)."""
    open_files: int = 64
    """RLIMIT_NOFILE."""
    session_cpu_s: float = 600.0
    """A session's total CPU seconds (the hard RLIMIT_CPU of its processes, which the code
    cannot raise); each cell has ``cpu_s`` of it, counted by the worker, and between cells
    every process of the session is stopped."""


@dataclass
class ExecutionResult:
    """What one run produced. ``status`` is one of ok, error, timeout, memory, output_limit, killed."""

    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    duration_s: float = 0.0
    truncated: bool = False
    isolation: str = ""
    """The isolation level that was actually active for this run (see ``sandbox.isolation()``)."""
    infra_error: bool = False
    """True when the sandbox itself failed (not the code)."""
    restarted: bool = False
    """Sessions only: the previous process was lost (timeout, crash) and state was reset."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Isolation:
    """Which isolation features are active. Each flag is verified, never assumed."""

    level: str = "process"
    """``namespaces`` (network + PID + mount namespaces), ``process`` (rlimits, process
    group, scrubbed env only)."""
    net_ns: bool = False
    pid_ns: bool = False
    mount_ns: bool = False
    user_ns: bool = False
    readonly_root: bool = False
    private_tmp: bool = False
    """A private /dev/shm (TMPDIR points at the work dir)."""
    private_workdir: bool = False
    """The work dirs live on a private, size-capped tmpfs (``disk_mb``) that only the
    worker's mount namespace sees: a total bound on what calls write."""
    caps_dropped: bool = False
    """All capabilities dropped (bounding set too) and no_new_privs set."""
    uid: int | None = None
    """The uid the code runs as, verified in a probe child (real, effective and saved, no
    groups, setuid(0) refused); None when it could not be verified. Inside a user
    namespace it is 0 there but an unprivileged uid on the host (``user_ns``)."""
    unprivileged: bool = False
    """The code is no root on the host: a non-zero uid, or uid 0 of a user namespace."""
    ipc_ns: bool = False
    """Each call has its own SysV IPC namespace: its shared memory dies with it."""
    uts_ns: bool = False
    proc_masked: bool = False
    """/proc/sys, /proc/sysrq-trigger and friends read-only, /proc/kcore and friends masked."""
    sys_hidden: bool = False
    """/sys is an empty read-only tmpfs (no kernel knobs, no cgroup files)."""
    private_dev: bool = False
    """/dev holds only null, zero, full, random, urandom (and a private /dev/shm)."""
    allowlist_root: bool = False
    """The file system is an allow-list: system dirs, the interpreter and its packages, the
    work dirs; never the project's source, task data, run dirs, caches or home dirs."""
    seccomp: bool = False
    """A seccomp filter refuses namespaces (user namespaces included), mounts, ptrace, the
    keyring, bpf, perf_event_open, io_uring, module loading and like calls (verified)."""
    homes_hidden: bool = False
    """/home, /root, /run, /tmp (and like dirs) are empty tmpfs, save the interpreter's paths."""
    cgroup_memory: bool = False
    cgroup_pids: bool = False
    rlimit_nproc: bool = False
    """RLIMIT_NPROC bounds the calls' processes (meaningful only when the uid is not root's)."""
    method: str = "none"
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_report(cls, hello: dict, *, method: str, user_ns: bool) -> Isolation:
        """What a worker's start-up report (its first protocol line) verified."""
        cg = hello.get("cgroups", {})
        flags = ("net_ns", "pid_ns", "mount_ns", "readonly_root", "private_tmp", "caps_dropped", "ipc_ns", "uts_ns")
        flags += ("proc_masked", "sys_hidden", "private_dev", "homes_hidden", "allowlist_root", "seccomp")
        info = cls(
            **{name: bool(hello.get(name)) for name in flags},
            user_ns=user_ns and bool(hello.get("pid_ns")),
            private_workdir=bool(hello.get("workdir_tmpfs")),
            uid=hello.get("uid"),
            cgroup_memory=bool(cg.get("memory")),
            cgroup_pids=bool(cg.get("pids")),
            method=method,
        )
        # uid 0 of a user namespace is this process's host uid: unprivileged unless that is root.
        host_uid = os.getuid() if info.user_ns and info.uid == 0 else info.uid
        info.unprivileged = host_uid is not None and host_uid != 0
        # Only a non-root (host) uid is counted against RLIMIT_NPROC (root is exempt).
        info.rlimit_nproc = info.unprivileged
        info.level = "namespaces" if (info.net_ns and info.pid_ns and info.mount_ns) else "process"
        for key, what in (("seccomp_error", "no seccomp filter"), ("mount_error", "mount setup failed")):
            if hello.get(key):
                info.notes.append(f"{what}: {hello[key]}")
        return info

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        flags = [name for name in FEATURES if getattr(self, name)]
        uid = f"uid {self.uid}" if self.uid is not None else "uid unverified"
        return f"{self.level} ({uid}; {', '.join(flags) or 'rlimits only'})"

    def missing(self) -> list[str]:
        """The hardening features that are not active here (empty when all are)."""
        gone = [name for name in FEATURES if name != "user_ns" and not getattr(self, name)]
        if not (self.cgroup_memory and self.cgroup_pids) and self.rlimit_nproc:
            gone = [name for name in gone if not name.startswith("cgroup_")]  # RLIMIT_NPROC + RLIMIT_AS stand in
        return gone


FEATURES = (
    "net_ns",
    "pid_ns",
    "mount_ns",
    "ipc_ns",
    "uts_ns",
    "user_ns",
    "unprivileged",
    "readonly_root",
    "private_tmp",
    "private_workdir",
    "caps_dropped",
    "proc_masked",
    "sys_hidden",
    "private_dev",
    "homes_hidden",
    "allowlist_root",
    "seccomp",
    "cgroup_memory",
    "cgroup_pids",
    "rlimit_nproc",
)


def _try(cmd: list[str]) -> bool:
    try:
        return (
            subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                env={"PATH": "/usr/bin:/bin"},
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def unshare_prefix() -> tuple[tuple[str, ...], bool]:
    """The ``unshare`` command prefix that works here (empty when none does), and whether
    it uses a user namespace."""
    if os.environ.get("AGENTIC_RL_SANDBOX_NO_NAMESPACES"):
        return (), False
    exe = shutil.which("unshare")
    if not exe:
        return (), False
    core = ["--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc", "--propagation", "private"]
    candidates = []
    if os.geteuid() == 0:
        candidates.append(([exe, *core], False))
    candidates.append(([exe, "--user", "--map-root-user", *core], True))
    for prefix, user_ns in candidates:
        if _try([*prefix, "true"]):
            return tuple(prefix), user_ns
    return (), False


def cgroup_v1_available() -> dict[str, bool]:
    """Whether we can create cgroup v1 memory / pids groups (root on a v1 host)."""
    found = {}
    for controller in ("memory", "pids"):
        path = os.path.join(CGROUP_V1_ROOT, controller)
        found[controller] = (
            os.path.isdir(path) and os.access(path, os.W_OK) and os.path.exists(os.path.join(path, "cgroup.procs"))
        )
    return found


def _own_cgroup_v2(proc_cgroup: str) -> str | None:
    try:
        with open(proc_cgroup) as handle:
            for line in handle:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def cgroup_v2_create(
    name: str,
    memory_mb: int,
    max_processes: int,
    *,
    root: str = "/sys/fs/cgroup",
    proc_cgroup: str = "/proc/self/cgroup",
) -> str | None:
    """A child cgroup (v2) with memory.max and pids.max, under this process's own cgroup
    when that subtree is delegated to us (writable, memory and pids enabled in its
    subtree_control); None when there is no such subtree (then RLIMIT_NPROC and RLIMIT_AS
    bound the calls instead)."""
    if not os.path.exists(os.path.join(root, "cgroup.controllers")):
        return None  # not a cgroup v2 (unified) hierarchy
    own = _own_cgroup_v2(proc_cgroup)
    if own is None:
        return None
    # Our own cgroup (when it may enable controllers for children), else its parent (a
    # delegated subtree whose leaf we run in: cgroups with processes cannot have children
    # with controllers, the "no internal processes" rule).
    candidates = [os.path.join(root, own.strip("/")).rstrip("/")]
    if own.strip("/"):
        candidates.append(os.path.dirname(candidates[0]))
    for parent in candidates:
        path = _cgroup_v2_child(parent, name, memory_mb, max_processes)
        if path is not None:
            return path
    return None


def _cgroup_v2_child(parent: str, name: str, memory_mb: int, max_processes: int) -> str | None:
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as handle:
            enabled = set(handle.read().split())
    except OSError:
        return None
    if not {"memory", "pids"} <= enabled or not os.access(parent, os.W_OK):
        return None
    path = os.path.join(parent, name)
    try:
        os.mkdir(path)
        for file, value in (
            ("memory.max", (memory_mb + 128) * 1024 * 1024),
            ("pids.max", max_processes + 4),
            ("memory.swap.max", 0),
        ):
            try:
                with open(os.path.join(path, file), "w") as handle:
                    handle.write(str(value))
            except OSError:
                if file != "memory.swap.max":  # swap accounting may be off; the others are the point
                    raise
        return path
    except OSError:
        try:
            os.rmdir(path)
        except OSError:
            pass
        return None

"""The parent's side of one sandbox worker process (a fork server).

A :class:`SandboxWorker` is one ``_worker.py`` process, started inside fresh network,
PID and mount namespaces when the kernel allows it, as a member of its own cgroups when
they are available. Every call forks a fresh child in it (milliseconds instead of an
interpreter start); the worker kills everything the call left behind. The parent keeps a
wall-clock backstop on top: if the worker does not answer in time, the whole worker (and
its namespace) is killed and replaced. This module starts the worker, speaks its
line-per-request protocol and tears it down; keeping several warm is the job of
:mod:`agentic_rl.sandbox.pool`."""

from __future__ import annotations

import base64
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from agentic_rl.sandbox.limits import (
    CGROUP_V1_ROOT,
    ExecutionResult,
    Isolation,
    Limits,
    SandboxError,
    cgroup_v1_available,
    cgroup_v2_create,
    unshare_prefix,
)
from agentic_rl.sandbox.policy import enforce
from agentic_rl.sandbox.visibility import hidden_paths, readable_by_others

WORKER_SCRIPT = str(Path(__file__).with_name("_worker.py"))
SCRUBBED_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "PYTHONIOENCODING": "utf-8",
}
_counter = itertools.count()
CLOSE_GRACE_S = 2.0  # how long ``close`` lets the worker end its calls' processes itself


def _count_uid_processes(uid: int) -> int:
    """Tasks (threads included: RLIMIT_NPROC counts them) that ``uid`` runs now."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    with open(f"/proc/{name}/stat") as handle:
                        count += int(handle.read().rsplit(")", 1)[1].split()[17])
            except (OSError, ValueError, IndexError):
                pass
    return count


class SandboxWorker:
    """One fork-server process. Not thread-safe: one call at a time (the pool ensures it)."""

    def __init__(
        self,
        *,
        memory_mb: int = 512,
        max_processes: int = 32,
        disk_mb: int = 64,
        namespaces: bool = True,
        cgroups: bool = True,
        start_timeout_s: float = 20.0,
        isolation: str | None = None,
    ) -> None:
        """``isolation``: ``required`` / ``best-effort`` / ``auto`` (None: the process's
        ``sandbox.isolation`` setting); a worker lacking what ``required`` demands is
        stopped and :class:`~agentic_rl.sandbox.policy.IsolationUnavailable` raised."""
        self.base = tempfile.mkdtemp(prefix="agentic-rl-sandbox-")
        # Owned by this process's uid, mode 0711: the call (another uid, or root without
        # capabilities) can enter its own dir (chowned to it) but not list or write beside it.
        os.chmod(self.base, 0o711)
        self.cgroup_paths: dict[str, str] = {}
        self._buffer = b""
        self.proc: subprocess.Popen | None = None
        self.dead = False
        self.had_session = False
        self.uid_claim = None  # the uid this worker's calls run as (root only): see sandbox/uids.py
        try:
            self._start(memory_mb, max_processes, disk_mb, namespaces, cgroups, start_timeout_s)
            if isolation != "report":  # ``isolation()`` only reports
                enforce(self.isolation, isolation)
        except BaseException:
            self.close()
            raise

    def _start(
        self, memory_mb: int, max_processes: int, disk_mb: int, namespaces: bool, cgroups: bool, start_timeout_s: float
    ) -> None:
        prefix, user_ns = unshare_prefix() if namespaces else ((), False)
        root = os.geteuid() == 0
        self.user_ns = user_ns
        if cgroups and root:
            available = cgroup_v1_available()
            name = f"agentic_rl_sandbox_{os.getpid()}_{next(_counter)}"
            for controller, ok in available.items():
                if not ok:
                    continue
                path = os.path.join(CGROUP_V1_ROOT, controller, name)
                try:
                    os.mkdir(path)
                    if controller == "memory":
                        Path(path, "memory.limit_in_bytes").write_text(str((memory_mb + 128) * 1024 * 1024))
                    else:
                        Path(path, "pids.max").write_text(str(max_processes + 4))
                    self.cgroup_paths[controller] = path
                except OSError:
                    try:
                        os.rmdir(path)
                    except OSError:
                        pass
        if cgroups and not self.cgroup_paths:
            # cgroup v2: a delegated subtree (root or not); one group holds both limits.
            path = cgroup_v2_create(f"agentic_rl_sandbox_{os.getpid()}_{next(_counter)}", memory_mb, max_processes)
            if path is not None:
                self.cgroup_paths = {"memory": path, "pids": path}
        # Root on the host drops the calls to a uid of this worker's own (RLIMIT_NPROC counts
        # per uid: a shared one let one worker's fork bomb starve the others); in a user
        # namespace the calls stay its uid 0, which is the (unprivileged) host uid of this process.
        uid = None
        if root and not user_ns:
            from agentic_rl.sandbox.uids import claim_uid  # POSIX only, and only as root

            self.uid_claim = claim_uid()
            uid = self.uid_claim.uid
        # RLIMIT_NPROC counts every process of the real uid on the machine, so the limit
        # is what exists now plus the sandbox's share (a backstop behind the pids cgroup;
        # with RLIMIT_AS it bounds a fork bomb's memory at about nproc x memory_mb).
        nproc = _count_uid_processes(uid if uid is not None else os.getuid()) + max_processes * 2
        config = {
            "base": self.base,
            "disk_mb": disk_mb,
            "base_owner": None,
            "uid": uid,
            "nproc": nproc,
            "mount_setup": bool(prefix),
            "cgroups": self.cgroup_paths,
            "parent_net_ns": os.stat("/proc/self/ns/net").st_ino,
            "parent_uts_ns": os.stat("/proc/self/ns/uts").st_ino,
            "parent_ipc_ns": os.stat("/proc/self/ns/ipc").st_ino,
            "hide": hidden_paths(),
        }
        command = [*prefix, sys.executable, "-I", "-B", WORKER_SCRIPT, json.dumps(config)]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(SCRUBBED_ENV),
            cwd=self.base,
            start_new_session=True,
            close_fds=True,
        )
        hello = self._read_line(time.monotonic() + start_timeout_s)
        if hello is None or not hello.get("ready"):
            raise SandboxError(f"sandbox worker failed to start: {hello}")
        self.report = hello
        self.isolation = Isolation.from_report(hello, method="unshare" if prefix else "none", user_ns=user_ns)
        self.isolation.notes.extend(self.uid_claim.notes if self.uid_claim is not None else [])
        if hello.get("uid_error"):
            self.isolation.notes.append(f"could not drop to uid {uid}: {hello['uid_error']}")
        if uid is not None and not self.isolation.mount_ns and not readable_by_others(sys.base_prefix):
            self.isolation.notes.append(
                f"the interpreter under {sys.base_prefix} is not readable by uid {uid} outside a mount namespace: only modules the worker preloaded import"
            )

    # ------------------------------------------------------------------ protocol
    def _read_line(self, deadline: float) -> dict | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            data = os.read(fd, 1 << 20)
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _request(self, payload: dict, deadline: float) -> dict | None:
        try:
            self.proc.stdin.write((json.dumps(payload) + "\n").encode())
            self.proc.stdin.flush()
        except (OSError, ValueError):
            return None
        try:
            return self._read_line(deadline)
        except (OSError, ValueError):
            return None

    def run(
        self, code: str, limits: Limits, files: Mapping[str, str | bytes] | None = None, *, keep: bool = False
    ) -> ExecutionResult:
        """Run ``code`` in a fresh child (``keep``: in this worker's persistent session child)."""
        if self.dead:
            return ExecutionResult(
                status="killed",
                stderr="sandbox worker is not running",
                infra_error=True,
                isolation=self.isolation.level,
            )
        name = "session" if keep else f"call-{next(_counter)}"
        workdir = os.path.join(self.base, name)
        encoded = {}
        for relative, content in (files or {}).items():
            if not os.path.normpath(os.path.join(workdir, relative)).startswith(workdir + os.sep):
                raise ValueError(f"file path escapes the work dir: {relative!r}")
            encoded[relative] = base64.b64encode(content.encode() if isinstance(content, str) else content).decode()
        # The worker creates the work dir (on its private tmpfs where it has one), writes
        # the files, and removes the dir once every process of the call is gone.
        request = {
            "op": "run",
            "code": code,
            "dir": name,
            "files": encoded,
            "timeout_s": float(limits.timeout_s),
            "cpu_s": float(limits.cpu_s or limits.timeout_s),
            "memory_mb": int(limits.memory_mb),
            "max_output_bytes": int(limits.max_output_bytes),
            "file_size_mb": int(limits.file_size_mb),
            "open_files": int(limits.open_files),
            "session_cpu_s": float(limits.session_cpu_s),
            "keep": keep,
            "had_session": self.had_session,
        }
        # Backstop: the worker enforces timeout_s itself; if it does not answer by then
        # plus a margin, the whole worker and its namespace go.
        response = self._request(request, time.monotonic() + limits.timeout_s + 5.0)
        if keep:
            self.had_session = True
        if response is None:
            self.kill()
            shutil.rmtree(workdir, ignore_errors=True)  # the host-side dir when there was no private tmpfs
            return ExecutionResult(
                status="killed",
                stderr="sandbox worker died or hung; it was killed",
                infra_error=True,
                isolation=self.isolation.level,
                restarted=keep,
            )
        return ExecutionResult(
            status=response["status"],
            stdout=response.get("stdout", ""),
            stderr=response.get("stderr", ""),
            exit_code=response.get("exit_code"),
            duration_s=float(response.get("duration_s", 0.0)),
            truncated=bool(response.get("truncated")),
            isolation=self.isolation.level,
            infra_error=bool(response.get("infra_error")),
            restarted=bool(response.get("restarted")),
        )

    def reset_session(self) -> None:
        if not self.dead:
            self._request({"op": "reset"}, time.monotonic() + 5.0)  # the worker removes the session dir
        self.had_session = False

    def workdirs(self) -> list[str]:
        """Names in the work-dir base as the worker sees it (its private tmpfs, if any)."""
        view = (
            f"/proc/{self.proc.pid}/root{self.base}"
            if self.proc is not None and self.proc.poll() is None
            else self.base
        )
        try:
            return sorted(os.listdir(view))
        except OSError:
            return sorted(os.listdir(self.base)) if os.path.isdir(self.base) else []

    # ------------------------------------------------------------------ teardown
    def kill(self) -> None:
        self.dead = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.kill()
            except OSError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.uid_claim is not None:
            self.uid_claim.end_processes()
        for path in self.cgroup_paths.values():
            for _ in range(100):
                try:
                    pids = [int(p) for p in Path(path, "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.005)

    def close(self) -> None:
        """Stop the worker, kill anything left, remove its directories and cgroups."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()  # the worker ends its session's processes, then exits
                self.proc.wait(timeout=CLOSE_GRACE_S)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()
        if self.proc is not None:
            try:
                self.proc.stdout.close()
            except (OSError, ValueError):
                pass
        for path in set(self.cgroup_paths.values()):
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.cgroup_paths = {}
        shutil.rmtree(self.base, ignore_errors=True)
        if self.uid_claim is not None:
            self.uid_claim.release()  # last, once kill() has ended the processes running as it

    def __enter__(self) -> SandboxWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

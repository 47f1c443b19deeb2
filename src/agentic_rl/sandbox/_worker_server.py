"""The sandbox worker's fork server: one call's lifecycle from work dir to result.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). Each ``run`` request forks a fresh child (``keep``
requests reuse a persistent child: a stateful session), drains its output with a cap,
enforces the wall timeout by killing the child's process group, and then kills every
process the call left behind. Reading the child's output and judging its outcome is
``_worker_output``'s job.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import time

from _worker_child import prepare_child, serve_cells
from _worker_cpu import tree_cpu_s
from _worker_files import empty_dir, write_beneath
from _worker_isolation import (
    become_subreaper,
    bind_workdir,
    in_new_net_ns,
    join_cgroups,
    probe_child,
    remove_sysv_ipc,
    split_workdirs,
)
from _worker_output import GARBAGE, call_status, capped, close_all, drain, pump, status_pending
from _worker_reaper import freeze, kill_group, kill_leftovers, oom_seen, thaw
from _worker_root import build_root
from _worker_zygote import Zygote

CHILD_PARAMS = ("cpu_s", "memory_mb", "file_size_mb", "open_files", "keep", "session_cpu_s")
"""What of a request the zygote passes to the call's child (never the code or the files)."""


class Worker:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.pid_ns = os.getpid() == 1
        self.base = config["base"]
        self.worker_ipc_ns = False
        self.cgroups: dict = {}  # controller -> an open fd of the worker's cgroup dir (/sys is hidden from the calls)
        self.uid: int | None = None  # the uid calls run as (None: the worker's own)
        self.drop = False
        self.report: dict = {"pid_ns": self.pid_ns}
        self.child: int | None = None  # a persistent (session) child
        self.child_pipes: dict = {}
        self.cells = 0
        self.writable_base: str | None = None  # the base's writable mount (base itself is read-only), when split
        self.bound: set[str] = set()  # work dirs bound writable under the read-only base

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        cfg = self.config
        joined = join_cgroups(cfg.get("cgroups") or {})
        self.report["cgroups"] = joined
        for controller, ok in joined.items():
            if ok:
                self.cgroups[controller] = os.open(
                    cfg["cgroups"][controller], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                )
        self.report["net_ns"] = in_new_net_ns(cfg.get("parent_net_ns"))
        self.report["uts_ns"] = os.stat("/proc/self/ns/uts").st_ino != cfg.get("parent_uts_ns")
        # With an IPC namespace of its own the worker empties it after each call; without
        # one each call's child makes its own (verified by the probe).
        self.worker_ipc_ns = os.stat("/proc/self/ns/ipc").st_ino != cfg.get("parent_ipc_ns")
        self.report["mount_ns"] = False
        if cfg.get("mount_setup"):
            # What the calls may read besides the system dirs: the interpreter and its packages
            # (never other import paths: an editable install's is the project's source).
            allow = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
            allow.append(os.path.dirname(os.path.realpath(sys.executable)))
            try:
                self.report.update(
                    build_root(self.base, int(cfg.get("disk_mb", 64)), cfg.get("base_owner"), allow, cfg["hide"])
                )
                self.report["mount_ns"] = True
                fd = split_workdirs(self.base)
                self.writable_base = None if fd is None else f"/proc/self/fd/{fd}"
                self.report["base_readonly"] = fd is not None
            except OSError as error:
                self.report["mount_error"] = str(error)
        if not self.pid_ns:
            become_subreaper()
        uid = cfg.get("uid")
        probe = probe_child(uid)
        if uid is not None and probe.get("uid") != uid:
            self.report["uid_error"] = probe.get("error") or f"could not become uid {uid}"
            probe = probe_child(None)
        self.report.update(
            ipc_ns=self.worker_ipc_ns or bool(probe.get("ipc_ns")),
            caps_dropped=bool(probe.get("caps_dropped")),
            uid=probe.get("uid"),
            seccomp=bool(probe.get("seccomp")),
        )
        if probe.get("seccomp_error"):
            self.report["seccomp_error"] = probe["seccomp_error"]
        self.uid = uid if probe.get("uid") == uid else None
        self.drop = bool(probe.get("caps_dropped")) or self.uid is not None
        # Each call in an IPC namespace of its own where the probe could make one (SysV and
        # POSIX message queues die with it); else the worker's own one, emptied after each call.
        self.own_ipc = bool(probe.get("ipc_ns"))
        self.seccomp = self.report["seccomp"]
        self.zygote = Zygote(self._child_main)  # before any request was read

    # ------------------------------------------------------------------ child
    def _child_main(self, params: dict, fds: tuple[int, int, int, int]) -> None:
        """In the call's child (forked by the zygote): limits, privileges, then a loop running cells."""
        try:
            prepare_child(
                params,
                fds,
                params["workdir"],
                self.config.get("nproc"),
                self.drop,
                self.uid,
                self.own_ipc,
                self.seccomp,
            )
            self.config = None  # nothing of the worker's state for the user code
            serve_cells()
        except BaseException as error:
            try:
                os.write(2, f"sandbox setup failed: {error}\n".encode())
            except BaseException:
                pass
        os._exit(70)

    def _spawn(self, request: dict) -> dict:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        st_r, st_w = os.pipe()
        params = {key: request[key] for key in CHILD_PARAMS if key in request}
        try:
            pid = self.zygote.spawn({**params, "workdir": self._workdir(request)}, (out_w, err_w, ctl_r, st_w))
        finally:
            for fd in (out_w, err_w, ctl_r, st_w):
                os.close(fd)
        for fd in (out_r, err_r, st_r):
            os.set_blocking(fd, False)
        return {"pid": pid, "out": out_r, "err": err_r, "ctl": ctl_w, "status": st_r}

    # ------------------------------------------------------------------ run
    def _prepare_dir(self, request: dict) -> str:
        """The call's private work dir (created here, inside the worker's mount namespace)
        with the request's files in it."""
        workdir = self._workdir(request)
        if self.writable_base is not None:
            slot = os.path.basename(workdir)
            if slot not in self.bound:
                writable = os.path.join(self.writable_base, slot)
                os.mkdir(writable, 0o700)
                self._own(writable)
                bind_workdir(writable, workdir)
                self.bound.add(slot)
        elif not os.path.isdir(workdir):
            os.mkdir(workdir, 0o700)
            self._own(workdir)
        if not (request.get("keep") and self.child is not None):
            empty_dir(workdir)  # a fresh child starts in an empty dir, whatever an earlier call left
            self._own(workdir)
        for relative, encoded in (request.get("files") or {}).items():
            write_beneath(workdir, relative, base64.b64decode(encoded), self.uid)
        return workdir

    def _clean_ipc(self) -> None:
        """What a call left in shared memory dies with it (once every process of the call is gone)."""
        if self.worker_ipc_ns and not self.own_ipc:
            remove_sysv_ipc()
        if self.report.get("private_dev"):
            empty_dir("/dev/shm", 0o1777)

    def _own(self, path: str) -> None:
        """The unprivileged call owns its scratch dir and the files placed in it."""
        if self.uid is not None:
            os.chown(path, self.uid, self.uid, follow_symlinks=False)

    def _child_for(self, request: dict) -> tuple[dict, bool]:
        """The live session child for a ``keep`` request, else a fresh one: (child, restarted)."""
        if request.get("keep") and self.child is not None:
            return self.child_pipes, False
        restarted = bool(request.get("keep") and request.get("had_session"))
        return self._spawn(request), restarted

    def _end_call(
        self, child: dict, chunks: dict, limit: int, exit_status: int | None, workdir: str, keep: bool
    ) -> int | None:
        """Kill and reap the call's child and everything it left behind; returns its exit status."""
        pid = child["pid"]
        if exit_status is None:
            kill_group(pid)
            try:
                _, exit_status = os.waitpid(pid, 0)
            except ChildProcessError:
                exit_status = None
        drain(chunks, limit)
        close_all((child["out"], child["err"], child["status"], child["ctl"]))
        kill_leftovers(self.pid_ns, self.cgroups, self.zygote.pid)
        self._clean_ipc()
        self.child, self.child_pipes = None, {}
        if not keep:
            self._remove_dir(workdir)  # after every process of the call is gone
        return exit_status

    def _workdir(self, request: dict) -> str:
        """Where a call runs. Under a read-only base, one dir bound writable once serves
        every call in turn ("session" the session's cells): it is emptied between calls, as
        an unmount per call would cost more than the rest of the call."""
        if self.writable_base is None:
            return os.path.join(self.base, request["dir"])
        return os.path.join(self.base, "session" if request.get("keep") else "call")

    def _remove_dir(self, workdir: str) -> None:
        slot = os.path.basename(workdir)
        if slot not in self.bound:
            shutil.rmtree(workdir, ignore_errors=True)
            return
        writable = os.path.join(self.writable_base, slot)
        empty_dir(writable)  # the code owned this dir: links in it are removed, never followed
        self._own(writable)

    def run(self, request: dict) -> dict:
        start = time.monotonic()
        workdir = self._prepare_dir(request)
        reused = bool(request.get("keep")) and self.child is not None
        child, restarted = self._child_for(request)
        self.cells += 1
        budget = None
        if request.get("keep"):
            if reused:
                thaw(self.zygote.pid)  # stopped since its last cell
            # The child's soft RLIMIT_CPU ends it past cpu_s + 1 s; one more second of grace before the worker's own count does.
            budget = (tree_cpu_s(self.zygote.pid), float(request["cpu_s"]) + 2, self.zygote.pid)
        limit = request["max_output_bytes"]
        chunks = {child["out"]: bytearray(), child["err"]: bytearray()}
        if reused and status_pending(child):
            # A status line nobody asked for (the last cell's code rewired the descriptors and
            # ran a cell of its own between calls): the session's channel cannot be trusted.
            outcome, kill_reason, exit_status = None, "garbage", None
        else:
            try:
                os.write(
                    child["ctl"],
                    (
                        json.dumps({"code": request["code"], "cell": self.cells, "cpu_s": request["cpu_s"]}) + "\n"
                    ).encode(),
                )
            except OSError:
                pass
            outcome, kill_reason, exit_status = pump(
                child, chunks, start + request["timeout_s"], limit, self.cells, budget
            )
        duration = time.monotonic() - start
        if kill_reason is not None:
            kill_group(child["pid"])
        alive = outcome is not None and kill_reason is None and request.get("keep")
        if alive and not freeze(self.zygote.pid):  # nothing of a session runs between its cells
            kill_group(child["pid"])
            alive = False
        if alive:
            self.child, self.child_pipes = child["pid"], child
        else:
            exit_status = self._end_call(child, chunks, limit, exit_status, workdir, bool(request.get("keep")))
        stdout, stderr, truncated = capped(bytes(chunks[child["out"]]), bytes(chunks[child["err"]]), limit)
        if kill_reason == "garbage":
            stderr += ("\n" if stderr and not stderr.endswith(b"\n") else "").encode() + GARBAGE.encode() + b"\n"
        status, exit_code = call_status(kill_reason, outcome, exit_status, lambda: oom_seen(self.cgroups))
        return {
            "status": status,
            "stdout": stdout.decode("utf-8", "replace"),
            "stderr": stderr.decode("utf-8", "replace"),
            "exit_code": exit_code,
            "duration_s": duration,
            "truncated": truncated,
            "restarted": restarted,
            "session_alive": bool(alive),
        }

    def stop_session(self) -> None:
        if self.child is not None:
            kill_group(self.child)
            pipes = self.child_pipes
            close_all((pipes["out"], pipes["err"], pipes["status"], pipes["ctl"]))
            self.child, self.child_pipes = None, {}
            kill_leftovers(self.pid_ns, self.cgroups, self.zygote.pid)
            self._clean_ipc()
        self._remove_dir(os.path.join(self.base, "session"))

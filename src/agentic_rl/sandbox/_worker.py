"""The sandbox worker: a small fork server that runs untrusted Python code.

Run as a script (stdlib only, so it starts fast): ``python -I _worker.py CONFIG_JSON``.
The parent talks to it with one JSON object per line on stdin/stdout. At start the worker
sets up what its process can (mount namespace view, cgroup membership) and reports what
it actually achieved; each ``run`` request forks a fresh child (``keep`` requests reuse a
persistent child: a stateful session), drains its output with a cap, enforces the wall
timeout by killing the child's process group, and then kills every process the call
left behind (the whole PID namespace when the worker is its init, else the cgroup).
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import resource
import select
import shutil
import signal
import sys
import time

MB = 1024 * 1024
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
SANDBOX_MOUNT = "/tmp/sandbox"


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None) -> bool:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    return _libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0


def _setup_mounts(base: str, disk_mb: int, owner: int | None) -> dict:
    """Read-only view of the whole file system except the work dirs; a private /dev/shm.

    The work dirs live on a private tmpfs of ``disk_mb`` mounted over ``base`` (a total
    bound on what the calls write, and creating / removing a dir per call costs
    microseconds instead of a disk round trip); if tmpfs cannot be mounted, ``base`` is
    bound onto itself and stays on the host's file system.
    """
    report = {"readonly_root": False, "private_tmp": False, "workdir_tmpfs": False}
    options = f"size={disk_mb}m,mode=0711" + (f",uid={owner},gid={owner}" if owner is not None else "")
    if _mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, options):
        report["workdir_tmpfs"] = True
    elif not _mount(base, base, None, MS_BIND):
        raise OSError("could not bind the sandbox base directory")
    mount_points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            mount_points.append(line.split()[4].replace("\\040", " "))
    failures = 0
    for point in sorted(set(mount_points), key=len):
        if point == base or point.startswith(("/proc", "/dev", "/sys")):
            continue
        if not _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID):
            # Locked flags (e.g. nodev inherited from the parent namespace) must be kept.
            if not _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV):
                failures += 1
    report["readonly_root"] = failures == 0
    if os.path.isdir("/dev/shm"):
        report["private_tmp"] = _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    return report


def drop_capabilities() -> None:
    """Drop every capability (bounding set too) and forbid regaining any via execve."""
    libc = _libc()
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # PR_CAPBSET_DROP, EINVAL: past the last cap
            break
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs failed")


def _capabilities_empty() -> bool:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")) and int(line.split()[1], 16) != 0:
                return False
    return True


class Worker:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.pid_ns = os.getpid() == 1
        self.base = config["base"]
        self.report: dict = {"pid_ns": self.pid_ns}
        self.child: int | None = None  # a persistent (session) child
        self.child_pipes: dict = {}

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        cfg = self.config
        cgroups = cfg.get("cgroups") or {}
        joined = {}
        for controller, path in cgroups.items():
            try:
                with open(os.path.join(path, "cgroup.procs"), "w") as handle:
                    handle.write("0")
                joined[controller] = True
            except OSError:
                joined[controller] = False
        self.report["cgroups"] = joined
        try:
            net_ino = os.stat("/proc/self/ns/net").st_ino
            self.report["net_ns"] = cfg.get("parent_net_ns") is not None and net_ino != cfg["parent_net_ns"]
        except OSError:
            self.report["net_ns"] = False
        self.report["mount_ns"] = False
        if cfg.get("mount_setup"):
            try:
                self.report.update(_setup_mounts(self.base, int(cfg.get("disk_mb", 64)), cfg.get("base_owner")))
                self.report["mount_ns"] = True
            except OSError as error:
                self.report["mount_error"] = str(error)
        if not self.pid_ns:
            # Orphans of a call (daemons) re-parent to the worker, which reaps them.
            _libc().prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        self.report["caps_dropped"] = False
        # Verify in a throwaway child that dropping every capability works here.
        pid = os.fork()
        if pid == 0:
            try:
                drop_capabilities()
                os._exit(0 if _capabilities_empty() else 1)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        self.report["caps_dropped"] = os.waitstatus_to_exitcode(status) == 0

    # ------------------------------------------------------------------ child
    def _child_main(self, request: dict, out_w: int, err_w: int, ctl_r: int, st_w: int) -> None:
        """In the forked child: limits, privileges, then a loop running cells."""
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(ctl_r, 3)
        os.dup2(st_w, 4)
        os.closerange(5, 65536)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(os.path.join(self.base, request["dir"]))
        cpu = int(request["cpu_s"]) + 1
        limits = [
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (request["memory_mb"] * MB,) * 2),
            (resource.RLIMIT_FSIZE, (request["file_size_mb"] * MB,) * 2),
            (resource.RLIMIT_NOFILE, (request["open_files"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        if self.config.get("nproc"):
            limits.append((resource.RLIMIT_NPROC, (self.config["nproc"],) * 2))
        for which, value in limits:
            try:
                resource.setrlimit(which, value)
            except (ValueError, OSError):
                pass
        if self.report.get("caps_dropped"):
            drop_capabilities()
        os.environ.clear()
        os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": os.getcwd(), "TMPDIR": os.getcwd()})
        import io

        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True)
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True)
        del request
        namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
        control = os.fdopen(3, "rb", buffering=0)
        self.config = None  # nothing of the worker's state for the user code
        buffer = b""
        while True:
            while b"\n" not in buffer:
                chunk = control.read(65536)
                if not chunk:
                    os._exit(0)
                buffer += chunk
            line, buffer = buffer.split(b"\n", 1)
            code = json.loads(line)["code"]
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
                import traceback

                outcome = "error"
                try:
                    kind, value, trace = sys.exc_info()
                    # Skip this loop's own frame: the model sees only its code.
                    traceback.print_exception(kind, value, trace.tb_next if trace is not None else None)
                except BaseException:
                    sys.stderr.write("error while printing the traceback\n")
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            if outcome == "exit":
                os._exit(exit_code & 0xFF)
            os.write(4, (json.dumps({"outcome": outcome}) + "\n").encode())

    def _spawn(self, request: dict) -> dict:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        st_r, st_w = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                self._child_main(request, out_w, err_w, ctl_r, st_w)
            except BaseException as error:
                try:
                    os.write(2, f"sandbox setup failed: {error}\n".encode())
                except BaseException:
                    pass
            os._exit(70)
        for fd in (out_w, err_w, ctl_r, st_w):
            os.close(fd)
        for fd in (out_r, err_r, st_r):
            os.set_blocking(fd, False)
        return {"pid": pid, "out": out_r, "err": err_r, "ctl": ctl_w, "status": st_r}

    # ------------------------------------------------------------------ run
    def _prepare_dir(self, request: dict) -> str:
        """The call's private work dir (created here, inside the worker's mount namespace)
        with the request's files in it."""
        workdir = os.path.join(self.base, request["dir"])
        if not os.path.isdir(workdir):
            os.mkdir(workdir, 0o700)
        for relative, encoded in (request.get("files") or {}).items():
            target = os.path.normpath(os.path.join(workdir, relative))
            if not target.startswith(workdir + os.sep):
                raise ValueError(f"file path escapes the work dir: {relative!r}")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(base64.b64decode(encoded))
        return workdir

    def run(self, request: dict) -> dict:
        start = time.monotonic()
        restarted = False
        workdir = self._prepare_dir(request)
        if request.get("keep") and self.child is not None:
            child = self.child_pipes
        else:
            if request.get("keep") and request.get("had_session"):
                restarted = True
            child = self._spawn(request)
        pid = child["pid"]
        try:
            os.write(child["ctl"], (json.dumps({"code": request["code"]}) + "\n").encode())
        except OSError:
            pass
        limit = request["max_output_bytes"]
        chunks = {child["out"]: bytearray(), child["err"]: bytearray()}
        deadline = start + request["timeout_s"]
        status_buf = b""
        outcome = None
        kill_reason = None
        exit_status = None
        open_fds = {child["out"], child["err"], child["status"]}
        while True:
            now = time.monotonic()
            if now >= deadline:
                kill_reason = "timeout"
                break
            try:
                ready, _, _ = select.select(list(open_fds), [], [], min(0.05, deadline - now) if exit_status is None else 0)
            except InterruptedError:
                continue
            for fd in ready:
                try:
                    data = os.read(fd, 1 << 16)
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
                kill_reason = "output_limit"
                break
            if b"\n" in status_buf:
                outcome = json.loads(status_buf.split(b"\n", 1)[0])["outcome"]
                # Collect what is already in the pipes, then finish the cell.
                self._drain(chunks, limit)
                break
            if exit_status is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    exit_status = status
                    continue  # one more non-blocking pass to drain the pipes
            elif not ready:
                break
        duration = time.monotonic() - start
        if kill_reason is not None:
            self._kill_group(pid)
        alive = outcome is not None and kill_reason is None and request.get("keep")
        if not alive:
            if exit_status is None:
                self._kill_group(pid)
                try:
                    _, exit_status = os.waitpid(pid, 0)
                except ChildProcessError:
                    exit_status = None
            self._drain(chunks, limit)
            for fd in (child["out"], child["err"], child["status"], child["ctl"]):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._cleanup()
            self.child, self.child_pipes = None, {}
            if not request.get("keep"):
                shutil.rmtree(workdir, ignore_errors=True)  # after every process of the call is gone
        else:
            self.child, self.child_pipes = pid, child
        stdout, stderr = bytes(chunks[child["out"]]), bytes(chunks[child["err"]])
        truncated = len(stdout) + len(stderr) > limit
        if truncated:
            keep_out = min(len(stdout), limit)
            stdout, stderr = stdout[:keep_out], stderr[: max(0, limit - keep_out)]
        exit_code = None
        status = "ok"
        if kill_reason:
            status = kill_reason
        elif outcome is not None:
            status = {"ok": "ok", "error": "error", "memory": "memory"}[outcome]
            exit_code = 0 if outcome == "ok" else 1
        elif exit_status is not None:
            exit_code = os.waitstatus_to_exitcode(exit_status)
            if exit_code == 0:
                status = "ok"
            elif exit_code > 0:
                status = "error"
            elif -exit_code == signal.SIGXCPU:
                status = "timeout"
            elif -exit_code == signal.SIGKILL:
                status = "memory" if self._oom_seen() else "killed"
            else:
                status = "error"
        else:
            status = "killed"
        if status != "ok" and exit_code is None and outcome is None and status in ("timeout", "output_limit"):
            exit_code = None
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

    def _drain(self, chunks: dict, limit: int) -> None:
        for fd, buf in chunks.items():
            while len(buf) <= limit:
                try:
                    data = os.read(fd, 1 << 16)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                buf += data

    def _oom_seen(self) -> bool:
        path = (self.config or {}).get("cgroups", {}).get("memory") if self.config else None
        if not path:
            return False
        try:
            with open(os.path.join(path, "memory.failcnt")) as handle:
                return int(handle.read().strip() or 0) > 0
        except OSError:
            return False

    def _kill_group(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    def _cleanup(self) -> None:
        """Kill everything the call left behind (daemons, setsid'd grandchildren)."""
        if self.pid_ns:
            # As init of its own PID namespace, kill(-1) reaches exactly the sandbox.
            for _ in range(50):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                except OSError:
                    pass
                self._reap()
                if not self._others_alive():
                    break
                time.sleep(0.002)
        else:
            # The worker is a child subreaper: orphans of the call (setsid'd daemons) are
            # re-parented to it, so killing its children until none is left reaches them
            # even without a PID namespace or cgroups.
            for _ in range(500):
                self._reap()
                children = self._children()
                if not children:
                    break
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.001)
        cgroups = (self._cfg_cgroups() or {})
        for controller in ("pids", "memory"):
            path = cgroups.get(controller)
            if not path:
                continue
            me = os.getpid()
            for _ in range(1000):
                try:
                    with open(os.path.join(path, "cgroup.procs")) as handle:
                        pids = [int(p) for p in handle.read().split() if int(p) != me]
                except OSError:
                    break
                if not pids:
                    break
                for other in pids:
                    try:
                        os.kill(other, signal.SIGKILL)
                    except OSError:
                        pass
                self._reap()
                time.sleep(0.002)
            break
        self._reap()

    def _cfg_cgroups(self) -> dict:
        return self.saved_cgroups

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    @staticmethod
    def _children() -> list[int]:
        """Live children of the worker (the worker is single-threaded: one task)."""
        try:
            with open(f"/proc/self/task/{os.getpid()}/children") as handle:
                return [int(pid) for pid in handle.read().split()]
        except OSError:
            return []

    def _others_alive(self) -> bool:
        try:
            return any(name.isdigit() and name != "1" for name in os.listdir("/proc"))
        except OSError:
            return False

    def stop_session(self) -> None:
        if self.child is not None:
            self._kill_group(self.child)
            for fd in (self.child_pipes["out"], self.child_pipes["err"], self.child_pipes["status"], self.child_pipes["ctl"]):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.child, self.child_pipes = None, {}
            self._cleanup()
        shutil.rmtree(os.path.join(self.base, "session"), ignore_errors=True)


def main() -> None:
    config = json.loads(sys.argv[1])
    # Signals aimed at the worker by the code it runs must not stop it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    worker = Worker(config)
    worker.saved_cgroups = dict(config.get("cgroups") or {})
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
        request = json.loads(line)
        op = request.get("op")
        if op == "run":
            try:
                response = worker.run(request)
            except Exception as error:
                response = {"status": "killed", "stdout": "", "stderr": f"sandbox worker error: {type(error).__name__}: {error}", "exit_code": None, "duration_s": 0.0, "truncated": False, "infra_error": True}
        elif op == "reset":
            worker.stop_session()
            response = {"ok": True}
        else:
            response = {"ok": True}
        out.write(json.dumps(response) + "\n")
    worker.stop_session()


if __name__ == "__main__":
    main()

"""What the sandbox worker does to its own process at start: mounts, cgroups, capabilities.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package, so the worker stays a bare fast-starting interpreter).
"""

from __future__ import annotations

import ctypes
import json
import os

import _worker_seccomp

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
CLONE_NEWIPC = 0x08000000
SANDBOX_MOUNT = "/tmp/sandbox"


def libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None) -> bool:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    return libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0


MS_NOEXEC = 8
O_PATH = getattr(os, "O_PATH", 0o10000000)
DEVICES = ("null", "zero", "full", "random", "urandom")
HIDDEN = ("/home", "/root", "/run", "/var/run", "/tmp", "/var/tmp", "/mnt", "/media", "/srv")
"""Covered by an empty tmpfs (not merely read-only): other users' files, run dirs, sockets."""
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq")
PROC_MASKED = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/acpi", "/proc/scsi")


def _bind_from_fd(fd: int, target: str) -> bool:
    # A path opened before its parent was covered stays reachable through its fd.
    return _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _hide(hidden: list, keep: list, base: str) -> bool:
    """Empty tmpfs over each hidden dir; the kept paths inside one (the interpreter, its
    site-packages) are bound back, the work-dir base is recreated (its tmpfs comes later)."""
    ok = True
    for point in hidden:
        inner = [k for k in keep if _within(k, point)]
        fds = [(k, os.open(k, O_PATH | os.O_CLOEXEC)) for k in inner]
        try:
            if not _mount("tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755"):
                ok = False
                continue
            for path, fd in fds:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "a").close()
                ok = _bind_from_fd(fd, path) and ok
            if _within(base, point):
                os.makedirs(base, mode=0o711, exist_ok=True)
        finally:
            for _, fd in fds:
                os.close(fd)
    return ok


def _private_dev() -> bool:
    """A tmpfs /dev with only null, zero, full, random, urandom (bound from the host's), the
    usual fd symlinks and a private /dev/shm: no disks, no kvm, no loop devices."""
    # (A host without one of them gets a /dev without it, and the report says so.)
    fds = {name: os.open(f"/dev/{name}", O_PATH | os.O_CLOEXEC) for name in DEVICES if os.path.exists(f"/dev/{name}")}
    try:
        if not _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"):
            return False
        ok = True
        for name, fd in fds.items():
            open(f"/dev/{name}", "a").close()
            ok = _bind_from_fd(fd, f"/dev/{name}") and ok
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ):
            os.symlink(target, f"/dev/{name}")
        os.mkdir("/dev/shm", 0o1777)
        ok = _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777") and ok
        ok = _mount(None, "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC) and ok
        return ok and len(fds) == len(DEVICES)
    finally:
        for fd in fds.values():
            os.close(fd)


def _mask_proc() -> bool:
    """Kernel knobs under the PID namespace's /proc read-only, the leaky files masked."""
    ok = True
    for point in PROC_READONLY:
        if os.path.exists(point):
            ok = (
                _mount(point, point, None, MS_BIND | MS_REC)
                and _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
                and ok
            )
    for point in PROC_MASKED:
        if os.path.isdir(point):
            ok = (
                _mount("tmpfs", point, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
                and ok
            )
        elif os.path.exists(point):
            ok = _mount("/dev/null", point, None, MS_BIND) and ok
    return ok


def split_workdirs(base: str) -> int | None:
    """Make ``base`` read-only in this mount namespace while the worker keeps writing to it
    through the returned fd (an O_PATH fd of the writable mount, now under a read-only bind
    of itself): each call's dir is then bound writable onto ``base/<dir>`` (``bind_workdir``),
    so a call cannot write beside its own dir, where the next call would find it. Where the
    calls' uid owns ``base`` (a user namespace) permissions alone cannot stop that. None
    when the remount fails (``base`` stays writable to its owner)."""
    fd = os.open(base, O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    if _mount(base, base, None, MS_BIND) and _mount(
        None, base, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    ):
        return fd
    os.close(fd)
    return None


def bind_workdir(writable: str, target: str) -> None:
    """Bind the writable dir ``writable`` onto ``target`` under the read-only base."""
    if not _mount(writable, target, None, MS_BIND):
        raise OSError(ctypes.get_errno(), f"could not bind the work dir {target}")


def setup_mounts(base: str, disk_mb: int, owner: int | None, keep: list, hide: list = ()) -> dict:
    """The sandbox's view of the file system, before any call runs.

    Home, run and temp dirs are hidden under empty tmpfs (the interpreter and the paths in
    ``keep`` are bound back; ``hide`` adds dirs such as the training run dirs), /sys is an empty tmpfs, /dev a minimal one, /proc's kernel
    knobs are read-only, and everything else is remounted read-only except the work dirs:
    a private tmpfs of ``disk_mb`` over ``base`` (a total bound on what the calls write;
    creating / removing a dir per call costs microseconds). If tmpfs cannot be mounted,
    ``base`` is bound onto itself and stays on the host's file system.
    """
    report = {"readonly_root": False, "private_tmp": False, "workdir_tmpfs": False}
    keep = sorted({os.path.realpath(k) for k in keep if os.path.exists(k)})
    keep = [k for k in keep if not any(k != other and _within(k, other) for other in keep)]
    hidden = []
    for point in (*HIDDEN, *hide):
        real = os.path.realpath(point)
        if os.path.isdir(real) and real != "/" and real not in keep:
            hidden.append(real)
    # A dir inside another hidden one is covered already (and gone once that is mounted),
    # unless it also lies inside a kept path that is bound back: hidden again after that.
    nested = [h for h in dict.fromkeys(hidden) if any(h != other and _within(h, other) for other in hidden)]
    rebound = [h for h in nested if any(_within(h, k) for k in keep)]
    hidden = [h for h in dict.fromkeys(hidden) if h not in nested]
    base_fd = os.open(base, O_PATH | os.O_CLOEXEC)
    try:
        report["homes_hidden"] = _hide(hidden, keep, base)
        for point in rebound:
            report["homes_hidden"] = (
                _mount("tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0755") and report["homes_hidden"]
            )
        options = f"size={disk_mb}m,mode=0711" + (f",uid={owner},gid={owner}" if owner is not None else "")
        if _mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, options):
            report["workdir_tmpfs"] = True
        elif not _bind_from_fd(base_fd, base):
            raise OSError("could not bind the sandbox base directory")
    finally:
        os.close(base_fd)
    mount_points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            mount_points.append(line.split()[4].replace("\\040", " "))
    failures = 0
    for point in sorted(set(mount_points), key=len):
        if point == base or point.startswith(("/proc", "/dev", "/sys")):
            continue
        if point not in hidden and any(_within(point, h) for h in hidden) and not any(_within(point, k) for k in keep):
            continue  # covered by a hidden dir's tmpfs: out of reach already
        if not _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID):
            # Locked flags (e.g. nodev inherited from the parent namespace) must be kept.
            if not _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV):
                failures += 1
    report["readonly_root"] = failures == 0
    report["proc_masked"] = _mask_proc()
    report["sys_hidden"] = os.path.isdir("/sys") and _mount(
        "tmpfs", "/sys", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555"
    )
    report["private_dev"] = report["private_tmp"] = _private_dev()
    return report


def join_cgroups(cgroups: dict) -> dict:
    """Move this process into each controller's cgroup; controller -> whether that worked."""
    joined = {}
    for controller, path in cgroups.items():
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as handle:
                handle.write("0")
            joined[controller] = True
        except OSError:
            joined[controller] = False
    return joined


def in_new_net_ns(parent_net_ns: int | None) -> bool:
    """Whether this process's network namespace differs from the parent's (inode ``parent_net_ns``)."""
    try:
        net_ino = os.stat("/proc/self/ns/net").st_ino
        return parent_net_ns is not None and net_ino != parent_net_ns
    except OSError:
        return False


def become_subreaper() -> None:
    """Orphans of a call (daemons) re-parent to this process, which reaps them."""
    libc().prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def drop_privileges(uid: int | None) -> None:
    """Drop every capability (bounding set too), become ``uid`` (all of real, effective and
    saved ids, no supplementary groups) when given, and forbid regaining anything via execve.

    The bounding set goes first (that needs CAP_SETPCAP), then the ids (that needs
    CAP_SETUID / CAP_SETGID; leaving uid 0 clears the remaining capabilities): no way back.
    """
    lib = libc()
    for cap in range(64):
        if lib.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # PR_CAPBSET_DROP, EINVAL: past the last cap
            break
    lib.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if lib.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if lib.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs failed")


def new_ipc_namespace() -> bool:
    """A private SysV IPC namespace for this call: its segments die with its last process."""
    return libc().unshare(CLONE_NEWIPC) == 0


def remove_sysv_ipc() -> None:
    """Remove every SysV shared-memory segment, semaphore set and message queue of this
    (the worker's own) IPC namespace: what a call created dies with it. Cheaper than an IPC
    namespace per call (about 0.5 ms a fork on a loaded machine)."""
    lib = libc()
    for kind, remove in (
        ("shm", lambda ident: lib.shmctl(ident, 0, None)),
        ("sem", lambda ident: lib.semctl(ident, 0, 0)),
        ("msg", lambda ident: lib.msgctl(ident, 0, None)),
    ):
        try:
            with open(f"/proc/sysvipc/{kind}") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                remove(int(fields[1]))  # IPC_RMID


def _capabilities_empty() -> bool:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")) and int(line.split()[1], 16) != 0:
                return False
    return True


def probe_child(uid: int | None) -> dict:
    """Verify in a throwaway child what a call's child will get: a private IPC namespace,
    no capabilities, ``uid`` with no way back to root, and the seccomp filter."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        result = {"ipc_ns": False, "caps_dropped": False, "uid": None, "seccomp": False}
        try:
            os.close(read_end)
            before = os.stat("/proc/self/ns/ipc").st_ino
            result["ipc_ns"] = new_ipc_namespace() and os.stat("/proc/self/ns/ipc").st_ino != before
            drop_privileges(uid)
            result["caps_dropped"] = _capabilities_empty()
            ids = set(os.getresuid()) | set(os.getresgid())
            regained = False
            if os.getuid() != 0:  # (uid 0 of a user namespace has nothing to regain)
                try:
                    os.setresuid(0, 0, 0)
                    regained = True
                except OSError:
                    pass
            if len(ids) == 1 and not regained and (uid is None or not os.getgroups()):
                result["uid"] = os.getuid()
            before = _worker_seccomp.filters()
            try:
                _worker_seccomp.install()
                result["seccomp"] = _worker_seccomp.verify(before)
            except (OSError, ValueError) as error:
                result["seccomp_error"] = str(error)
        except BaseException as error:
            result["error"] = f"{type(error).__name__}: {error}"
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while True:
        chunk = os.read(read_end, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"ipc_ns": False, "caps_dropped": False, "uid": None, "error": "the probe child died"}

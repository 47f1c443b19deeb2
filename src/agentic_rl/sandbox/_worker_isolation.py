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


def libc():
    return ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype, flags, data=None) -> bool:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    return libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0


MS_NOEXEC = 8
O_PATH = getattr(os, "O_PATH", 0o10000000)
DEVICES = ("null", "zero", "full", "random", "urandom")
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq")
PROC_MASKED = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/acpi", "/proc/scsi")


def _bind_from_fd(fd: int, target: str) -> bool:
    # A path opened before its parent was covered stays reachable through its fd.
    return mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def private_dev() -> bool:
    """A tmpfs /dev with only null, zero, full, random, urandom (bound from the host's), the
    usual fd symlinks and a private /dev/shm: no disks, no kvm, no loop devices."""
    # (A host without one of them gets a /dev without it, and the report says so.)
    fds = {name: os.open(f"/dev/{name}", O_PATH | os.O_CLOEXEC) for name in DEVICES if os.path.exists(f"/dev/{name}")}
    try:
        if not mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755"):
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
        ok = mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777") and ok
        ok = mount(None, "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC) and ok
        return ok and len(fds) == len(DEVICES)
    finally:
        for fd in fds.values():
            os.close(fd)


def mask_proc() -> bool:
    """Kernel knobs under the PID namespace's /proc read-only, the leaky files masked."""
    ok = True
    for point in PROC_READONLY:
        if os.path.exists(point):
            ok = (
                mount(point, point, None, MS_BIND | MS_REC)
                and mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
                and ok
            )
    for point in PROC_MASKED:
        if os.path.isdir(point):
            ok = (
                mount("tmpfs", point, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555") and ok
            )
        elif os.path.exists(point):
            ok = mount("/dev/null", point, None, MS_BIND) and ok
    return ok


def split_workdirs(base: str) -> int | None:
    """Make ``base`` read-only in this mount namespace while the worker keeps writing to it
    through the returned fd (an O_PATH fd of the writable mount, now under a read-only bind
    of itself): each call's dir is then bound writable onto ``base/<dir>`` (``bind_workdir``),
    so a call cannot write beside its own dir, where the next call would find it. Where the
    calls' uid owns ``base`` (a user namespace) permissions alone cannot stop that. None
    when the remount fails (``base`` stays writable to its owner)."""
    fd = os.open(base, O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    if mount(base, base, None, MS_BIND) and mount(
        None, base, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    ):
        return fd
    os.close(fd)
    return None


def bind_workdir(writable: str, target: str) -> None:
    """Bind the writable dir ``writable`` onto ``target`` under the read-only base."""
    if not mount(writable, target, None, MS_BIND):
        raise OSError(ctypes.get_errno(), f"could not bind the work dir {target}")


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

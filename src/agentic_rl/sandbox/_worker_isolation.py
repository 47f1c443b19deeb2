"""What the sandbox worker does to its own process at start: mounts, cgroups, capabilities.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package, so the worker stays a bare fast-starting interpreter).
"""

from __future__ import annotations

import ctypes
import os

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
SANDBOX_MOUNT = "/tmp/sandbox"


def libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None) -> bool:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    return libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0


def setup_mounts(base: str, disk_mb: int, owner: int | None) -> dict:
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


def drop_capabilities() -> None:
    """Drop every capability (bounding set too) and forbid regaining any via execve."""
    lib = libc()
    for cap in range(64):
        if lib.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # PR_CAPBSET_DROP, EINVAL: past the last cap
            break
    lib.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if lib.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    if lib.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs failed")


def _capabilities_empty() -> bool:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")) and int(line.split()[1], 16) != 0:
                return False
    return True


def can_drop_capabilities() -> bool:
    """Verify in a throwaway child that dropping every capability works here."""
    pid = os.fork()
    if pid == 0:
        try:
            drop_capabilities()
            os._exit(0 if _capabilities_empty() else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0

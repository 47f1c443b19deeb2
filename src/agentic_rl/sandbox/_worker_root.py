"""The sandbox's file system: a new root holding an allow-list, built by the worker at start.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). In the worker's own mount namespace a tmpfs becomes
the root (``pivot_root``; the host's old root is detached): in it only the system dirs
(``/usr``, ``/etc`` and the top-level links into ``/usr``), the interpreter's prefixes
(its standard library and installed packages), the work dirs (a private tmpfs), a fresh
``/proc``, a minimal ``/dev`` and empty ``/sys``, ``/tmp``, ``/home``. Nothing else of the
host exists there: not the project's source (an editable install's path entry is never
bound), task data, run dirs, caches or home dirs. Denied paths inside an allowed one (the
project's own package, packages that carry benchmark data) are covered by an empty
tmpfs no one but root may enter. Everything is read-only but the work dirs and /dev/shm.
"""

from __future__ import annotations

import ctypes
import os
import platform

import _worker_seccomp
from _worker_isolation import (
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    libc,
    mask_proc,
    mount,
    private_dev,
    within,
)

SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
EMPTY = ("/tmp", "/home", "/root", "/run", "/var/tmp", "/mnt", "/srv")
"""Empty, read-only dirs in the new root (programs expect them; TMPDIR is the work dir)."""
MNT_DETACH = 2


def _pivot_root(new_root: str) -> None:
    """Make ``new_root`` this mount namespace's root and detach the old one."""
    nr = _worker_seccomp.ARCHES[platform.machine()][1]["pivot_root"]
    os.chdir(new_root)
    if libc().syscall(nr, b".", b".") != 0:  # the old root is stacked under the new one...
        raise OSError(ctypes.get_errno(), "pivot_root failed")
    if libc().umount2(b".", MNT_DETACH) != 0:  # ...and detached from it here
        raise OSError(ctypes.get_errno(), "could not detach the old root")
    os.chdir("/")


def _allowed(allow: list) -> list:
    """Real, existing paths, none inside another."""
    paths = sorted({os.path.realpath(path) for path in allow if os.path.exists(path)})
    return [path for path in paths if not any(path != other and within(path, other) for other in paths)]


def _bind(source: str, root: str) -> bool:
    target = root + source
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    return mount(source, target, None, MS_BIND | MS_REC)


def _readonly_everywhere(writable: tuple) -> bool:
    """Remount every mount of the new root read-only, but ``writable`` ones and /proc, /dev."""
    points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            points.append(line.split()[4].replace("\\040", " "))
    failures = 0
    for point in sorted(set(points), key=len):
        if point in writable or point.startswith(("/proc", "/dev")):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        # Locked flags (e.g. nodev inherited from the parent namespace) must be kept.
        if not mount(None, point, None, flags) and not mount(None, point, None, flags | MS_NODEV):
            failures += 1
    return failures == 0


def build_root(base: str, disk_mb: int, owner: int | None, allow: list, deny: list) -> dict:
    """Build the new root and move into it (see the module docstring); the report's flags.

    ``allow``: the interpreter's prefixes; ``deny``: paths never shown, even inside them.
    ``base`` (the work dirs) keeps its path: a private tmpfs of ``disk_mb`` (a total bound
    on what the calls write), owned by ``owner`` when given.
    """
    root = os.path.join(base, ".root")
    os.mkdir(root, 0o755)
    if not mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"):
        raise OSError(ctypes.get_errno(), "could not mount the new root")
    bound = True
    for name in SYSTEM:
        if os.path.islink(name):  # /bin -> usr/bin on a merged-/usr system
            os.symlink(os.readlink(name), root + name)
    for path in _allowed([name for name in SYSTEM if not os.path.islink(name)] + list(allow)):
        bound = _bind(path, root) and bound
    for name in ("proc", "dev"):  # /dev is covered by a minimal one once inside
        os.makedirs(f"{root}/{name}", exist_ok=True)
        bound = mount(f"/{name}", f"{root}/{name}", None, MS_BIND | MS_REC) and bound
    for name in (*EMPTY, "/sys"):
        os.makedirs(root + name, exist_ok=True)
    os.makedirs(root + base, exist_ok=True)
    options = f"size={disk_mb}m,mode=0711" + (f",uid={owner},gid={owner}" if owner is not None else "")
    report = {"workdir_tmpfs": mount("tmpfs", root + base, "tmpfs", MS_NOSUID | MS_NODEV, options)}
    for path in sorted({os.path.realpath(p) for p in deny}):
        if os.path.isdir(root + path):  # only what an allowed path brought in
            bound = mount("tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0") and bound
    _pivot_root(root)
    report["allowlist_root"] = bound
    report["homes_hidden"] = bound  # nothing of /home, /root, /run, /tmp is in the new root
    report["readonly_root"] = mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV) and (
        _readonly_everywhere((base,))
    )
    report["proc_masked"] = mask_proc()
    report["sys_hidden"] = mount(
        "tmpfs", "/sys", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555"
    )
    report["private_dev"] = report["private_tmp"] = private_dev()
    return report

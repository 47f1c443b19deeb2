"""Files the sandbox worker writes into, and empties out of, a call's work dir: never through a link.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). The work dir belongs to the call's code, which may
have planted symlinks (or hard links) in it between cells; the worker runs as root, so
each path is walked one component at a time, relative to the directory opened before
it, with ``O_NOFOLLOW``, and a staged file is always a new inode (any old entry of that
name is unlinked first, then the file is created with ``O_EXCL``): nothing the code
placed can redirect a write.
"""

from __future__ import annotations

import os
import stat
import subprocess

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts(relative: str) -> list[str]:
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or relative.startswith("/"):
        raise ValueError(f"file path escapes the work dir: {relative!r}")
    return parts


def _mode(name: str, dir_fd: int) -> int:
    """The entry's mode, its link not followed (0: no such entry)."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return 0


def _unlink_entry(name: str, dir_fd: int) -> None:
    """Remove ``name`` (a file, link or whole tree) from the dir ``dir_fd``, links not followed."""
    mode = _mode(name, dir_fd)
    if not mode:
        return
    if stat.S_ISDIR(mode):
        empty_dir_fd(os.open(name, DIR_FLAGS, dir_fd=dir_fd), close=True)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def write_beneath(root: str, relative: str, data: bytes, uid: int | None) -> None:
    """Write ``data`` to ``root/relative`` (dirs created on the way), owned by ``uid`` when
    given. A link anywhere on the path is an error (``OSError``), never followed."""
    parts = _parts(relative)
    fd = os.open(root, DIR_FLAGS)
    try:
        for name in parts[:-1]:
            if not stat.S_ISDIR(_mode(name, fd)):
                _unlink_entry(name, fd)  # a link (or file) the code left where a dir goes
                os.mkdir(name, 0o700, dir_fd=fd)
                created = True
            else:
                created = False
            inner = os.open(name, DIR_FLAGS, dir_fd=fd)  # ELOOP / ENOTDIR on a link or a file
            os.close(fd)
            fd = inner
            if created and uid is not None:
                os.fchown(fd, uid, uid)
        _unlink_entry(parts[-1], fd)
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            if uid is not None:
                os.fchown(out, uid, uid)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        finally:
            os.close(out)
    finally:
        os.close(fd)


def empty_dir_fd(fd: int, close: bool = False) -> None:
    """Remove everything inside the dir open as ``fd`` (links removed, never followed)."""
    try:
        for name in os.listdir(fd):
            _unlink_entry(name, fd)
    finally:
        if close:
            os.close(fd)


def empty_dir(path: str, mode: int = 0o700) -> None:
    """Remove everything inside ``path`` (the dir itself stays, with ``mode``: the code may
    have changed it); nothing when it is gone.
    A tree too deep for the recursion (or the open-file limit) goes with ``find -delete``,
    which walks without following links either; what still remains is an ``OSError``."""
    try:
        fd = os.open(path, DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        os.fchmod(fd, mode)
        empty_dir_fd(os.dup(fd), close=True)
    except (RecursionError, OSError):
        # (``path`` may be a /proc/self/fd path: find gets the dir as the same fd of its own.)
        subprocess.run(
            ["find", f"/proc/self/fd/{fd}/", "-mindepth", "1", "-delete"], capture_output=True, pass_fds=(fd,)
        )
        if os.listdir(fd):
            raise OSError(f"could not empty the work dir {path}") from None
    finally:
        os.close(fd)

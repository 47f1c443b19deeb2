"""One unprivileged uid per sandbox worker (when the sandbox starts as root).

RLIMIT_NPROC counts the processes of a uid, machine-wide: with one uid shared by every
worker, a fork bomb in one worker's call used up the count of all the others, whose calls
then could not fork. Each live worker therefore claims its own uid (used as its gid too)
from a high range no real user has: ``AGENTIC_RL_SANDBOX_UIDS=FIRST-LAST``, default
2000000000-2000065535 (systemd leaves 1879048192-2147352575 unassigned: above its container
ranges, below its "foreign" range and the uids that break signed 32-bit code).

POSIX only (fcntl, pwd): imported by the pool only when it starts a worker as root.

A claim is an exclusive ``flock`` on ``/run/agentic-rl-sandbox-uids/<uid>``, held by the
process that started the worker: two workers never share a uid, in one process or across
processes (torchrun ranks, Ray workers), and a crashed process's claims end with it.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import signal
import stat
import tempfile
import time
from dataclasses import dataclass, field

from agentic_rl.sandbox.limits import SandboxError

SHARED_UID = 65534
"""nobody: the uid every worker shares where the range is not mapped (a container's user
namespace often maps only 65536 uids); isolation notes say so."""

DEFAULT_UIDS = "2000000000-2000065535"
ENV = "AGENTIC_RL_SANDBOX_UIDS"
_MAX_UID = 4294967294  # (uid_t)-1 means "unchanged" to setresuid


def uid_range() -> range:
    """The uids sandbox workers may claim (``AGENTIC_RL_SANDBOX_UIDS``, FIRST-LAST)."""
    text = os.environ.get(ENV) or DEFAULT_UIDS
    first, dash, last = text.strip().partition("-")
    try:
        low, high = int(first), int(last)
    except ValueError:
        low = high = -1
    if not dash or not 0 < low <= high <= _MAX_UID:
        raise SandboxError(
            f"{ENV}: expected FIRST-LAST, unprivileged uids no user has (e.g. {DEFAULT_UIDS}), got {text!r}"
        )
    return range(low, high + 1)


def _mapped(uids: range) -> bool:
    """Whether all of ``uids`` exist as uids and gids in this process's user namespace."""
    for name in ("uid_map", "gid_map"):
        try:
            with open(f"/proc/self/{name}") as handle:
                extents = [tuple(int(x) for x in line.split()) for line in handle if line.strip()]
        except (OSError, ValueError):
            return False
        if not any(inside <= uids.start and uids.stop <= inside + count for inside, _, count in extents):
            return False
    return True


def _has_an_owner(uid: int) -> bool:
    """Whether a user or group (files, NSS) has this id: never hand out someone's id."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except (KeyError, OverflowError):
            pass
    return False


def _lock_dir() -> str:
    # /run is root's and emptied at boot; the temp dir only where there is no /run.
    for parent in ("/run", tempfile.gettempdir()):
        path = os.path.join(parent, "agentic-rl-sandbox-uids")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            info = os.lstat(path)
        except OSError:
            continue
        # Another user's folder would let that user hand two workers the same uid.
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077:
            return path
    raise SandboxError(
        "sandbox uids: no private folder for their locks (/run/agentic-rl-sandbox-uids, or agentic-rl-sandbox-uids in the temp dir, owned by another user?)"
    )


@dataclass
class UidClaim:
    """The uid a worker's calls run as, held until :meth:`release`."""

    uid: int
    notes: list[str] = field(default_factory=list)
    _lock: int | None = None

    def end_processes(self) -> None:
        """SIGKILL every process this uid runs, stopped ones included, until none is left
        (a worker's own uid: nothing else runs as it; never the shared fallback uid). A
        session's processes are stopped between cells, so they outlive a killed worker."""
        if self.uid == SHARED_UID:
            return
        for _ in range(50):
            found = False
            for name in os.listdir("/proc"):
                try:
                    if name.isdigit() and os.stat(f"/proc/{name}").st_uid == self.uid:
                        found = True
                        os.kill(int(name), signal.SIGKILL)
                except OSError:
                    pass
            if not found:
                return
            time.sleep(0.01)

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # the flock ends with its file description
            self._lock = None


def claim_uid() -> UidClaim:
    """The lowest free uid of :func:`uid_range` for a new worker (``SHARED_UID``, with a
    note, where that range does not exist in this user namespace)."""
    uids = uid_range()
    if not _mapped(uids):
        return UidClaim(
            SHARED_UID,
            [
                f"uids {uids.start}-{uids.stop - 1} ({ENV}) are not mapped in this user namespace: every worker runs as uid {SHARED_UID} and shares its RLIMIT_NPROC count"
            ],
        )
    directory = _lock_dir()
    for uid in uids:
        if _has_an_owner(uid):
            continue
        fd = os.open(os.path.join(directory, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another live worker's
            os.close(fd)
            continue
        return UidClaim(uid, _lock=fd)
    raise SandboxError(
        f"sandbox uids: all {len(uids)} uids of {uids.start}-{uids.stop - 1} ({ENV}) are in use by live workers or users; widen the range"
    )

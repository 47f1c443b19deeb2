"""Each sandbox worker runs its calls as a uid of its own (as root): RLIMIT_NPROC counts per
uid, so one worker's fork bomb must not use up another's processes.

Nothing here writes a kernel knob or attempts an escape; the fork bomb is bounded by the
worker's own RLIMIT_NPROC and killed at the end of its call.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import threading
import time
import warnings

import pytest

from agentic_rl import sandbox
from agentic_rl.sandbox import uids

ISOLATION = sandbox.isolation()
ROOT_HOST = os.geteuid() == 0 and not ISOLATION.user_ns
needs_root = pytest.mark.skipif(
    not ROOT_HOST,
    reason=f"the uid is dropped only when the sandbox starts as root outside a user namespace: {ISOLATION.describe()}",
)
claims_need_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="uids are claimed only by a sandbox started as root (the claims' lock folder is root's)"
)
UID_CODE = "import os\nprint(os.getresuid(), os.getresgid())"
LIMITS = sandbox.Limits(timeout_s=10.0)


def _ids(uid: int) -> str:
    return f"({uid}, {uid}, {uid}) ({uid}, {uid}, {uid})\n"


def test_the_range_is_configurable_and_checked(monkeypatch) -> None:
    assert uids.uid_range() == range(2_000_000_000, 2_000_065_536)
    monkeypatch.setenv(uids.ENV, "3000000000-3000000009")
    assert uids.uid_range() == range(3_000_000_000, 3_000_000_010)
    for bad in ("2000000000", "0-10", "10-5", "a-b", "1-4294967295"):
        monkeypatch.setenv(uids.ENV, bad)
        with pytest.raises(
            sandbox.SandboxError, match=rf"^AGENTIC_RL_SANDBOX_UIDS: expected FIRST-LAST, .*got '{bad}'$"
        ):
            uids.uid_range()


@claims_need_root
def test_a_uid_some_user_or_group_has_is_never_handed_out(monkeypatch) -> None:
    taken = next(entry.pw_uid for entry in pwd.getpwall() if entry.pw_uid > 0)
    monkeypatch.setenv(uids.ENV, f"{taken}-{taken}")
    monkeypatch.setattr(uids, "_mapped", lambda _: True)
    with pytest.raises(sandbox.SandboxError, match="uids of .* are in use by live workers or users; widen the range$"):
        uids.claim_uid()


def test_an_unmapped_range_falls_back_to_one_shared_uid_with_a_note(monkeypatch) -> None:
    # A container's user namespace often maps only uids 0-65535.
    monkeypatch.setattr(uids, "_mapped", lambda _: False)
    claim = uids.claim_uid()
    assert claim.uid == uids.SHARED_UID and "are not mapped in this user namespace" in claim.notes[0]


@claims_need_root
def test_claims_are_exclusive_across_processes_and_end_with_their_holder(monkeypatch, tmp_path) -> None:
    # A range of its own: live workers of other test runs on this machine claim from the default one.
    first_uid = 2_000_060_000 + os.getpid() % 500 * 10
    monkeypatch.setenv(uids.ENV, f"{first_uid}-{first_uid + 9}")
    monkeypatch.setattr(uids, "_mapped", lambda _: True)
    monkeypatch.setattr(uids.tempfile, "gettempdir", lambda: str(tmp_path))  # where /run is not writable
    first = uids.claim_uid()
    assert first.uid == first_uid
    claim_elsewhere = "import agentic_rl.sandbox.uids as u\nu._mapped = lambda _: True\nprint(u.claim_uid().uid)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
    other = int(
        subprocess.run(
            [sys.executable, "-c", claim_elsewhere], capture_output=True, text=True, env=env, check=True
        ).stdout
    )
    assert other == first_uid + 1  # not ours, though we are another process
    second = uids.claim_uid()
    assert second.uid == first_uid + 1  # the other process's claim ended with it
    first.release()
    again = uids.claim_uid()
    assert again.uid == first_uid  # freed, and the lowest free again
    again.release()
    second.release()


@needs_root
def test_each_worker_runs_its_calls_as_its_own_uid() -> None:
    with sandbox.SandboxPool(size=2, limits=LIMITS) as pool, sandbox.SandboxWorker() as single:
        workers = [*pool._all, single]
        ids = [worker.isolation.uid for worker in workers]
        assert len(set(ids)) == 3 and all(uid in uids.uid_range() for uid in ids), ids
        for worker in workers:
            assert worker.isolation.unprivileged and worker.isolation.rlimit_nproc
            assert worker.run(UID_CODE, LIMITS).stdout == _ids(worker.isolation.uid)
    # The uid the process-wide probe reports is one a worker really ran as.
    assert ISOLATION.uid in uids.uid_range()


def _tasks_of(uid: int) -> int:
    """Tasks whose real uid is ``uid`` (what RLIMIT_NPROC counts)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as handle:
                    fields = dict(line.split(":", 1) for line in handle if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    count += int(fields["Threads"])
            except (OSError, KeyError, ValueError):
                pass
    return count


BOMB = (
    "import os, time\n"
    "count = 0\n"
    "try:\n"
    "    while True:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(30)\n"
    "            os._exit(0)\n"
    "        count += 1\n"
    "except OSError as error:\n"
    "    print('stopped', error.errno, count, flush=True)\n"
    "time.sleep(4)\n"  # hold every process while the other worker's call runs
)
FORK = "import os\npid = os.fork()\nif pid == 0:\n    os._exit(7)\nprint('forked', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))"


@needs_root
def test_a_fork_bomb_in_one_worker_does_not_starve_another() -> None:
    # Process mode (no PID namespace, no cgroups): RLIMIT_NPROC is the only process bound,
    # and it counts per uid across the machine.
    warnings.simplefilter("ignore")  # best-effort's warning about process mode (inside catch_warnings)
    options = dict(namespaces=False, cgroups=False, max_processes=8, isolation="best-effort")
    with (
        warnings.catch_warnings(),
        sandbox.SandboxWorker(**options) as bombed,
        sandbox.SandboxWorker(**options) as other,
    ):
        assert bombed.isolation.uid != other.isolation.uid and bombed.isolation.rlimit_nproc
        results = {}
        thread = threading.Thread(target=lambda: results.setdefault("bomb", bombed.run(BOMB, LIMITS)))
        thread.start()
        deadline, last, stable_since = time.monotonic() + 8, -1, time.monotonic()
        while time.monotonic() < deadline:  # until the bomb stops growing: its uid's count is used up
            count = _tasks_of(bombed.isolation.uid)
            if count != last:
                last, stable_since = count, time.monotonic()
            elif count >= 8 and time.monotonic() - stable_since > 0.5:
                break
            time.sleep(0.05)
        assert last >= 8, last
        during = other.run(FORK, LIMITS)
        thread.join()
        assert "stopped 11" in results["bomb"].stdout, results["bomb"]  # EAGAIN: its RLIMIT_NPROC was exhausted
        assert during.status == "ok" and during.stdout == "forked 7\n", during
        assert _tasks_of(bombed.isolation.uid) == 0  # the bomb's processes died with its call

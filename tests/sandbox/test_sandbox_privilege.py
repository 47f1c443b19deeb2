"""Hardening (issue 21): the code is an unprivileged uid (its worker's own) in an empty box.

Host knobs are probed with ``os.access`` only: nothing here writes a kernel knob, a cgroup
file or a device node, and no test attempts a real escape. Cases that need a feature are
skipped, with the reason, where the probe says it is not active.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest

from agentic_rl import sandbox
from agentic_rl.sandbox.uids import uid_range

ISOLATION = sandbox.isolation()
ROOT_HOST = os.geteuid() == 0 and not ISOLATION.user_ns
needs_mount_ns = pytest.mark.skipif(not ISOLATION.mount_ns, reason=f"no mount namespace here: {ISOLATION.describe()}")
KNOBS = [
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/vm/drop_caches",
    "/proc/sysrq-trigger",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/dev/vda",
    "/dev/kvm",
]


@pytest.fixture(scope="module")
def pool():
    with sandbox.SandboxPool(size=1, limits=sandbox.Limits(timeout_s=5.0, memory_mb=256)) as pool:
        yield pool


def _writable_inside(run, paths: list[str]) -> dict:
    result = run(f"import json, os\nprint(json.dumps({{p: os.access(p, os.W_OK) for p in {paths!r}}}))")
    assert result.status == "ok", result
    return json.loads(result.stdout)


UID_CODE = "import os\ntry:\n    os.setresuid(0, 0, 0)\n    back = True\nexcept OSError:\n    back = False\nprint(os.getresuid(), os.getresgid(), os.getgroups(), back)"


def _dropped_to(uid: int) -> str:
    """UID_CODE's line for code that runs as ``uid`` (its gid too), no groups, no way back."""
    return f"({uid}, {uid}, {uid}) ({uid}, {uid}, {uid}) [] False\n"


@pytest.mark.skipif(not ROOT_HOST, reason="the uid is dropped when the sandbox starts as root outside a user namespace")
def test_the_code_runs_as_an_unprivileged_uid_with_no_way_back(pool):
    assert ISOLATION.uid in uid_range() and ISOLATION.unprivileged and ISOLATION.rlimit_nproc
    result = pool.execute(UID_CODE)
    assert pool.isolation.uid in uid_range() and result.stdout == _dropped_to(pool.isolation.uid), result


def test_host_knobs_cgroup_files_and_devices_are_not_writable(pool):
    # Paths as the host has them: every cgroup membership file and device node.
    cgroup_files = (
        glob.glob("/sys/fs/cgroup/*/cgroup.procs")
        + glob.glob("/sys/fs/cgroup/*/*/cgroup.procs")
        + glob.glob("/sys/fs/cgroup/cgroup.procs")
    )
    devices = [os.path.join("/dev", name) for name in os.listdir("/dev")]
    if not ISOLATION.private_dev:  # on the host's /dev the world-writable ttys stay writable
        devices = [path for path in devices if not os.stat(path).st_mode & 0o002]
    allowed = {
        f"/dev/{name}"
        for name in ("null", "zero", "full", "random", "urandom", "shm", "fd", "stdin", "stdout", "stderr")
    }
    paths = KNOBS + cgroup_files + [path for path in devices if path not in allowed]
    writable = [path for path, ok in _writable_inside(pool.execute, paths).items() if ok]
    if ISOLATION.user_ns or not ROOT_HOST:
        writable = [path for path in writable if not path.startswith("/proc/")]  # procfs checks the host uid instead
    assert writable == []


@needs_mount_ns
def test_private_dev_sys_and_proc(pool):
    assert ISOLATION.private_dev and ISOLATION.sys_hidden and ISOLATION.proc_masked
    code = "import os\nprint(sorted(os.listdir('/dev')), os.listdir('/sys'), open('/dev/urandom', 'rb').read(4).__len__(), open('/dev/null', 'w').write('x'))"
    result = pool.execute(code)
    assert (
        result.stdout
        == "['fd', 'full', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero'] [] 4 1\n"
    ), result


@needs_mount_ns
def test_home_run_and_temp_contents_are_invisible(pool, tmp_path):
    (tmp_path / "secret.txt").write_text("host secret")
    # What the interpreter needs is bound back (e.g. /root/.pyenv); nothing else is visible.
    needed = [
        os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))
    ]
    probes = [str(tmp_path / "secret.txt"), str(tmp_path)]
    for parent in ("/root", "/home", "/run", "/tmp", "/var/tmp"):
        if os.path.isdir(parent):
            for name in sorted(os.listdir(parent))[:20]:
                path = os.path.join(parent, name)
                if (
                    not any(
                        need == os.path.realpath(path) or need.startswith(os.path.realpath(path) + "/")
                        for need in needed
                    )
                    and "agentic-rl-sandbox-" not in name
                ):
                    probes.append(path)
    result = pool.execute(f"import json, os\nprint(json.dumps([p for p in {probes!r} if os.path.lexists(p)]))")
    assert result.status == "ok" and json.loads(result.stdout) == [], result
    assert pool.execute("import fractions, numbers; print(fractions.Fraction(1, 3))").stdout == "1/3\n"


SHM_CODE = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "key = 0x5A1D0000 + os.getpid() % 65536\n"
    "ident = libc.shmget(key, 4096, 0o1000 | 0o600)\n"  # IPC_CREAT
    "print(key if ident >= 0 else -ctypes.get_errno())\n"
)


def _shm_keys(text: str) -> set[int]:
    return {int(line.split()[0]) for line in text.splitlines()[1:] if line.split()}


@pytest.mark.skipif(not ISOLATION.ipc_ns, reason=f"no IPC namespace here: {ISOLATION.describe()}")
def test_sysv_shared_memory_dies_with_the_call(pool):
    created = pool.execute(SHM_CODE)
    key = int(created.stdout)
    assert key > 0, created
    with open("/proc/sysvipc/shm") as handle:
        assert key not in _shm_keys(handle.read()), "the segment reached the host's IPC namespace"
    after = pool.execute("print(open('/proc/sysvipc/shm').read())")
    assert after.status == "ok" and key not in _shm_keys(after.stdout)
    # A session keeps its segment across cells and loses it when it ends.
    with sandbox.PythonSession(sandbox.Limits(timeout_s=5.0)) as session:
        key = int(session.run(SHM_CODE).stdout)
        assert key in _shm_keys(session.run("print(open('/proc/sysvipc/shm').read())").stdout)
        session.run("raise SystemExit(0)")  # the session's process ends
        assert key not in _shm_keys(session.run("print(open('/proc/sysvipc/shm').read())").stdout)


@pytest.mark.skipif(not ROOT_HOST, reason="the uid is dropped when the sandbox starts as root")
def test_process_mode_is_unprivileged_too():
    limits = sandbox.Limits(timeout_s=5.0)
    with sandbox.SandboxWorker(namespaces=False, cgroups=False, isolation="best-effort") as worker:
        assert (
            worker.isolation.level == "process"
            and worker.isolation.uid in uid_range()
            and worker.isolation.rlimit_nproc
        )
        assert worker.run(UID_CODE, limits).stdout == _dropped_to(worker.isolation.uid)
        assert _writable_inside(lambda code: worker.run(code, limits), KNOBS) == {path: False for path in KNOBS}
        # No cgroups: RLIMIT_NPROC (it bites once the uid is not root's) stops a fork bomb of
        # memory-hungry children, and RLIMIT_AS caps each of them (10 MB held, 1 GB refused).
        bomb = (
            "import os, time\n"
            "try:\n"
            "    for _ in range(100000):\n"
            "        if os.fork() == 0:\n"
            "            held = bytearray(10 << 20)\n"
            "            try:\n"
            "                bytearray(1 << 30)\n"
            "            except MemoryError:\n"
            "                pass\n"
            "            time.sleep(30)\n"
            "except OSError as e:\n"
            "    print('stopped', e.errno)\n"
        )
        # Without the worker's IPC namespace each call has its own: SysV memory dies with it.
        key = int(worker.run(SHM_CODE, limits).stdout)
        assert key > 0
        with open("/proc/sysvipc/shm") as handle:
            assert key not in _shm_keys(handle.read())
        result = worker.run(bomb, sandbox.Limits(timeout_s=5.0, memory_mb=128))
        assert "stopped 11" in result.stdout, result
        assert worker.run("print(1)", limits).stdout == "1\n"


@needs_mount_ns
def test_run_directories_are_hidden(monkeypatch):
    # A folder the sandbox otherwise shows (the checkout may itself lie under /tmp or a
    # home, hidden wholesale): inside the interpreter's site-packages, which is bound back
    # read-only, beside torch; removed afterwards.
    import shutil
    import sysconfig
    import tempfile

    base = sysconfig.get_paths()["purelib"]
    if not os.access(base, os.W_OK):  # e.g. the suite run as an unprivileged user (test_sandbox_userns.py)
        pytest.skip(f"needs a folder the sandbox shows that this user can write ({base} is not)")
    run_dir = tempfile.mkdtemp(prefix=".sandbox-test-run-", dir=base)
    try:
        with open(os.path.join(run_dir, "config.yaml"), "w") as handle:
            handle.write("api_key: not-a-real-key\n")
        monkeypatch.setattr(sandbox.visibility, "_HIDDEN", set())
        sandbox.hide_path(run_dir)
        with sandbox.SandboxWorker() as worker:
            result = worker.run(
                f"import os\nprint(os.path.exists(os.path.join({run_dir!r}, 'config.yaml')), os.path.isdir(os.path.join({base!r}, 'torch')))",
                sandbox.Limits(timeout_s=5),
            )
        assert result.stdout == "False True\n", result
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

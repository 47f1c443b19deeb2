"""Run a candidate solution against HumanEval-style unit tests, resisting reward hacks.

The tests are a ``check(candidate)`` function (HumanEval's shape). The design keeps the
verdict out of reach of the solution code:

* Two processes, both inside one fresh sandbox call (``agentic_rl.sandbox.execute``):
  the **checker** (the sandboxed cell) runs only trusted code (the task's prompt and its
  tests); the **candidate** is a separate, freshly *exec'ed* interpreter (not a fork, so
  it shares none of the checker's memory) that runs the solution. The solution never
  runs in the checker, so it cannot redefine ``check``, ``assert``, builtins or modules.
* ``candidate`` in the checker is a proxy: each call sends ``repr`` of its arguments to
  the candidate process, which calls the solution's function and answers ``repr`` of the
  result; the checker rebuilds it with ``ast.literal_eval``. Results are therefore plain
  builtin values: an object whose ``__eq__`` always returns True never reaches a
  comparison. A crash, ``sys.exit`` / ``os._exit``, a hang (checker-side deadline) or an
  unparseable reply fails that test.
* The candidate's stdout is a private protocol pipe to the checker and its stderr goes
  to /dev/null, so printing "OK"/"PASSED" reaches nobody; files it writes live in the
  call's private work dir and nothing reads them (there is no pytest, no conftest).
* The checker reports through the call's stdout one line ``<nonce> <json>``. The nonce is
  a fresh random token embedded in the checker's source (sent to the sandbox over a pipe,
  never written to disk); the checker marks itself non-dumpable (``PR_SET_DUMPABLE``) so
  the same-uid candidate cannot read its memory or descriptors through /proc or ptrace.
  A missing or malformed verdict line scores zero: every failure mode is fail-closed.

Each top-level statement of ``check`` that holds a non-trivial ``assert`` is one test
(``assert True`` lines are not); other statements are setup, run in order in the same
namespace. ``partial credit`` is the fraction of tests passed; full marks also need every
setup statement to have run. The time budget (``timeout_s``) covers the whole check.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from agentic_rl.sandbox import SandboxPool, execute

_CANDIDATE = r"""
import ast, json, os, sys
proto_in = os.fdopen(os.dup(0), "r")
proto_out = os.fdopen(os.dup(1), "w", buffering=1)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0); os.dup2(null, 1)
sys.stdin = open(os.devnull); sys.stdout = sys.stderr
job = json.loads(proto_in.readline())
namespace = {"__name__": "__solution__"}
try:
    exec(compile(job["prompt"], "<prompt>", "exec"), namespace)
    exec(compile(job["answer"], "<solution>", "exec"), namespace)
    function = namespace[job["entry_point"]]
    proto_out.write("ready\n")
except BaseException as error:
    proto_out.write(json.dumps({"load_error": type(error).__name__}) + "\n")
    os._exit(1)
for line in proto_in:
    try:
        call = json.loads(line)
        value = function(*ast.literal_eval(call["args"]), **ast.literal_eval(call["kwargs"]))
        reply = {"value": repr(value)}
    except BaseException as error:
        reply = {"error": type(error).__name__}
    proto_out.write(json.dumps(reply) + "\n")
"""

_CHECKER = r'''
import ast, builtins, json, os, select, subprocess, sys, time
try:  # the candidate (same uid) must not read this process's memory or descriptors
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
except Exception:
    pass
job = json.loads(__JOB__)
nonce = job.pop("nonce")
deadline = time.monotonic() + job["timeout_s"]
MAX_REPLY = 1 << 20


class CandidateFailed(Exception):
    pass


class Candidate:
    """The solution's function, called in its own interpreter."""

    def __init__(self):
        self.proc = None
        self.broken = False

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", job["candidate_source"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True)
        self.buffer = b""
        self.send({"prompt": job["prompt"], "answer": job["answer"], "entry_point": job["entry_point"]})
        if self.receive() != b"ready":
            self.broken = True  # the solution itself fails to load: no restart helps
            raise CandidateFailed("load")

    def send(self, message):
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            raise CandidateFailed("send") from None

    def receive(self):
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.stop()
                raise CandidateFailed("timeout")
            chunk = os.read(fd, 65536)
            if not chunk or len(self.buffer) > MAX_REPLY:
                self.stop()
                raise CandidateFailed("died")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __call__(self, *args, **kwargs):
        if self.broken:
            raise CandidateFailed("load")
        if self.proc is None:
            self.start()
        self.send({"args": repr(args), "kwargs": repr(kwargs)})
        reply = json.loads(self.receive())
        if "value" not in reply:
            error = getattr(builtins, str(reply.get("error")), None)
            raise error() if isinstance(error, type) and issubclass(error, Exception) else CandidateFailed("raised")
        return ast.literal_eval(reply["value"])


def is_test(statement):
    return any(isinstance(node, ast.Assert) and not isinstance(node.test, ast.Constant) for node in ast.walk(statement))


def main():
    namespace = {"__name__": "__check__"}
    exec(compile(job["prompt"], "<prompt>", "exec"), namespace)
    exec(compile(job["test"], "<test>", "exec"), namespace)
    check = next(node for node in ast.parse(job["test"]).body if isinstance(node, ast.FunctionDef) and node.name == "check")
    statements = check.body if any(is_test(s) for s in check.body) else [ast.Try(body=check.body, handlers=[], orelse=[], finalbody=[])]
    candidate = Candidate()
    # Some tests name the function itself (HumanEval/33 compares with sort_third(...)):
    # in the checker that name, too, is the proxy, never the prompt's stub.
    scope = dict(namespace, candidate=candidate)
    scope[job["entry_point"]] = candidate
    passed, setup_ok = [], True
    for statement in statements:
        ok = True
        try:
            exec(compile(ast.fix_missing_locations(ast.Module(body=[statement], type_ignores=[])), "<test>", "exec"), scope)
        except BaseException:
            ok = False
        if is_test(statement) or len(statements) == 1:
            passed.append(ok)
        else:
            setup_ok = setup_ok and ok
    candidate.stop()
    return {"passed": passed, "setup_ok": setup_ok}


verdict = main()
sys.stdout.write("\n" + nonce + " " + json.dumps(verdict) + "\n")
sys.stdout.flush()
'''


@dataclass(frozen=True)
class TestReport:
    """How a solution fared: ``passed`` of ``total`` tests; ``complete`` when the checker ran
    to the end (no sandbox timeout or crash) and every setup statement ran."""

    passed: int
    total: int
    complete: bool
    status: str = "ok"

    @property
    def all_passed(self) -> bool:
        return self.complete and self.total > 0 and self.passed == self.total

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def run_unit_tests(
    answer: str,
    *,
    prompt: str,
    test: str,
    entry_point: str,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    pool: SandboxPool | None = None,
) -> TestReport:
    """Run ``test``'s ``check(candidate)`` against ``entry_point`` as defined by ``prompt``
    followed by ``answer``, in a fresh sandboxed process pair (see the module docstring)."""
    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce,
        "prompt": prompt,
        "answer": answer,
        "test": test,
        "entry_point": entry_point,
        "timeout_s": timeout_s,
        "candidate_source": _CANDIDATE,
    }
    code = _CHECKER.replace("__JOB__", repr(json.dumps(job)))
    # The margin lets the checker, whose own deadline is timeout_s, report after a hang.
    result = execute(code, timeout_s=timeout_s + 5.0, memory_mb=memory_mb, max_output_bytes=1 << 20, pool=pool)
    if result.infra_error:
        from agentic_rl.sandbox import SandboxError

        raise SandboxError(f"sandbox failure while running unit tests: {result.stderr.strip() or result.status}")
    verdicts = [line[len(nonce) + 1 :] for line in result.stdout.splitlines() if line.startswith(nonce + " ")]
    try:
        verdict = json.loads(verdicts[-1])
        passed = [bool(item) for item in verdict["passed"]]
        setup_ok = verdict["setup_ok"] is True
    except (IndexError, ValueError, KeyError, TypeError):
        return TestReport(passed=0, total=0, complete=False, status=result.status)
    return TestReport(passed=sum(passed), total=len(passed), complete=setup_ok, status=result.status)

"""math_equivalent: math-verify runs in a worker process with a deadline, so a hostile
answer is scored not equivalent instead of freezing the trainer (issue 21 part 5)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("math_verify")

from agentic_rl.rewards import math_equivalent  # noqa: E402
from agentic_rl.rewards.math import DEFAULT_TIMEOUT_S, MathVerifier  # noqa: E402


@pytest.fixture
def verifier():
    verifier = MathVerifier()
    assert verifier.equivalent("x+1", "1+x")  # started and warm
    yield verifier
    verifier.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): count it as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_normal_equivalences_hold() -> None:
    assert math_equivalent("12", "12.0") and math_equivalent("\\frac{1}{2}", "0.5") and math_equivalent("x+1", "1+x")
    assert math_equivalent("$\\sqrt{4}$", "2") and math_equivalent("3/4", "0.75")
    assert not math_equivalent("73", "72") and not math_equivalent("x+2", "1+x") and not math_equivalent(None, "1")
    assert not math_equivalent("1" * 20_000 + "x", "1")  # too long to be an answer: not parsed


def test_exploding_answer_is_not_equivalent_within_the_deadline(verifier: MathVerifier) -> None:
    # Measured before the worker: still running after 8 s, holding the GIL.
    result: list[bool] = []
    start = time.monotonic()
    thread = threading.Thread(target=lambda: result.append(verifier.equivalent("9^{9^{9^{9}}}", "1")), daemon=True)
    thread.start()
    thread.join(10.0)  # the library's bound is DEFAULT_TIMEOUT_S (< 2 s); slack for a loaded machine
    assert not thread.is_alive() and result == [False]
    assert time.monotonic() - start < 10.0 and DEFAULT_TIMEOUT_S < 2.0
    assert verifier.restarts == 1
    # The killed worker was replaced: normal comparisons still work.
    assert verifier.equivalent("\\frac{1}{2}", "0.5") and not verifier.equivalent("2", "3")


def test_crashed_worker_is_restarted(verifier: MathVerifier) -> None:
    first = verifier._process.pid
    verifier._process.kill()
    verifier._process.wait()
    assert verifier.equivalent("x+1", "1+x")
    assert verifier._process.pid != first and verifier.restarts == 1


def test_worker_does_not_outlive_the_trainer() -> None:
    code = (
        "from agentic_rl.rewards.math import math_equivalent, math_verifier\n"
        "assert math_equivalent('x+1', '1+x')\n"
        "print(math_verifier()._process.pid, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_invalid_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        MathVerifier(timeout_s=0)

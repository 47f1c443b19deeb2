"""Python sessions (issue 21, part 4): CPU time per cell, and garbage on the descriptors the
worker and the child talk over ends the cell with an error, never the worker."""

from __future__ import annotations

import pytest

from agentic_rl import sandbox

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.6:\n    pass\nprint('done')"


def test_cpu_time_is_per_cell_not_per_session():
    # cpu_s=2 gives each cell a 2-3 s CPU budget; seven 0.6 s cells add up past it. Each burns
    # 0.6 s as the kernel counts it (process_time), under a third of its budget, so a loaded
    # machine (which stretches wall time, not CPU time) cannot push a cell past it.
    with sandbox.PythonSession(sandbox.Limits(timeout_s=30.0, cpu_s=2.0)) as session:
        for index in range(7):
            result = session.run(BURN)
            assert result.status == "ok" and result.stdout == "done\n" and not result.restarted, (index, result)
        spin = session.run("while True:\n    pass", timeout_s=20.0)
        assert spin.status == "timeout" and spin.duration_s < 10, spin  # a cell past its own budget still dies


def test_a_cell_that_raises_its_own_cpu_limit_still_ends_at_its_budget():
    """A session child's hard RLIMIT_CPU is the session's total, so code can raise its soft
    limit up to that; the worker counts the cell's CPU time itself (its processes included)
    and ends it as a timeout long before the wall timeout."""
    # The hard limit is the session's total (it cannot be raised); the soft one can, up to it.
    raise_limit = "import resource\nhard = resource.getrlimit(resource.RLIMIT_CPU)[1]\nresource.setrlimit(resource.RLIMIT_CPU, (hard, hard))\n"
    with sandbox.PythonSession(sandbox.Limits(timeout_s=60.0, cpu_s=1.0)) as session:
        assert session.run("x = 1").ok
        unlimited = session.run(
            "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))"
        )
        assert unlimited.status == "error" and "ValueError" in unlimited.stderr, unlimited
        assert session.run("import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU)[1])").stdout == "600\n"
        spin = session.run(raise_limit + "while True:\n    pass", timeout_s=60.0)
        assert spin.status == "timeout" and spin.duration_s < 15, spin
        forked = session.run(
            raise_limit + "import os\nif os.fork() == 0:\n    while True:\n        pass\nos.wait()", timeout_s=60.0
        )
        assert forked.status == "timeout" and forked.duration_s < 15, forked  # a child process's CPU counts too
        if sandbox.isolation().uid not in (None, 0):  # calls run as their own uid: leaving the session does not help
            escaped = session.run(
                raise_limit
                + "import os\nif os.fork() == 0:\n    os.setsid()\n    while True:\n        pass\nos.wait()",
                timeout_s=60.0,
            )
            assert escaped.status == "timeout" and escaped.duration_s < 15, escaped


@pytest.mark.parametrize(
    "garbage",
    [
        b"garbage\n",
        b'{"outcome": "ok"}\n',
        b'{"outcome": "bogus", "cell": 1}\n',
        b"[1, 2]\n",
        b"x" * 20000,
        b"\xff\xfe\n",
    ],
)
def test_garbage_on_the_status_descriptor(garbage):
    code = f"import os\nos.write(4, {garbage!r})\nimport time\ntime.sleep(0.2)"
    with sandbox.PythonSession(sandbox.Limits(timeout_s=5.0)) as session:
        assert session.run("x = 1").ok
        result = session.run(code)
        assert result.status == "error" and not result.infra_error and "status descriptor" in result.stderr, result
        after = session.run("print('x' in globals())")
        assert after.status == "ok" and after.restarted and after.stdout == "False\n", after
    with sandbox.SandboxPool(size=1) as pool:
        result = pool.execute(code)
        assert result.status == "error" and not result.infra_error, result
        assert pool.execute("print(1)").stdout == "1\n"


def test_garbage_on_the_control_descriptor():
    # The code replaces the child's control descriptor with a pipe of its own holding junk:
    # the next cell is an error, the worker survives and the session restarts after it.
    code = "import os\nr, w = os.pipe()\nos.write(w, b'not json\\n')\nos.dup2(r, 3)"
    with sandbox.PythonSession(sandbox.Limits(timeout_s=3.0)) as session:
        assert session.run(code).ok
        broken = session.run("print('never runs')")
        assert broken.status == "error" and not broken.infra_error and "never runs" not in broken.stdout, broken
        after = session.run("print(2)")
        assert after.status == "ok" and after.stdout == "2\n", after

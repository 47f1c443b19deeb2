"""The python tool (stateful sessions), ToolEnv.close, the engine's close hook, math envs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentic_rl import envs, sandbox
from agentic_rl.rewards import gold_answer, math_equivalent
from agentic_rl.tools.python_tool import make_python_tool, truncate_output
from agentic_rl.types import ToolCall

GSM8K = str(Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k" / "train.jsonl")
needs_gsm8k = pytest.mark.skipif(not os.path.exists(GSM8K), reason=f"{GSM8K} not present")


def py(code: str) -> ToolCall:
    return ToolCall(name="python", arguments={"code": code})


def test_session_state_persists_and_is_isolated():
    one, two = make_python_tool(timeout_s=1), make_python_tool(timeout_s=1)
    try:
        assert one.invoke(py("x = 41")).ok
        assert one.invoke(py("print(x + 1)")).content == "42"
        other = two.invoke(py("print(x)"))
        assert not other.ok and "NameError" in other.content
        timed_out = one.invoke(py("while True: pass"))
        assert not timed_out.ok and "timed out" in timed_out.content
        after = one.invoke(py("print('x' in globals())"))
        assert "variables were reset" in after.content and "False" in after.content
    finally:
        one.close()
        two.close()
    assert one.session is None


def test_session_close_releases_the_process():
    session = sandbox.PythonSession(sandbox.Limits(timeout_s=2))
    assert session.run("import os; print(os.getpid())").ok
    base = session._worker.base
    session.close()
    assert not os.path.exists(base)
    assert session.run("print(1)").infra_error


def test_tool_never_raises_and_truncates():
    tool = make_python_tool(timeout_s=1, max_output_chars=100)
    try:
        result = tool.invoke(py("print('y' * 5000)"))
        assert result.ok and "output truncated" in result.content and len(result.content) < 200
        assert tool.invoke(ToolCall(name="python", arguments={"code": 3})).malformed
        assert not tool.invoke(py("raise SystemExit(3)")).ok
    finally:
        tool.close()
    text = truncate_output("a" * 50 + "b" * 50, 30)
    assert text.startswith("a" * 20) and text.endswith("b" * 10) and "70 more characters" in text


def test_gold_answers_and_equivalence():
    assert gold_answer("so 48+24 = <<48+24=72>>72\n#### 1,072") == "1072"
    assert math_equivalent("72", "72") and math_equivalent("72.00", "72") and math_equivalent("\\frac{1}{2}", "0.5")
    assert math_equivalent("1/2", "0.5") and not math_equivalent("73", "72") and not math_equivalent(None, "1")


def test_math_python_env_with_custom_fields(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"q": "What is 6*7?", "a": "42"}) + "\n")
    env = envs.make("math-python", path=str(data), question_field="q", answer_field="a", timeout_s=2)
    envs.check_env(env)
    env.reset(options={"task_index": 0})
    observations, reward, terminated, _, info = env.step(
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "python", "arguments": {"code": "v = 6*7\\nprint(v)"}}</tool_call>',
        }
    )
    assert not terminated and "42" in observations[0]["content"] and info["tool_results"][0].ok
    _, reward, terminated, _, _ = env.step({"role": "assistant", "content": "<answer>42.0</answer>"})
    assert terminated and reward == 1.0
    env.close()
    with pytest.raises(ValueError, match="env.path"):
        envs.make("math-python")


@needs_gsm8k
def test_gsm8k_env_rollout_closes_sessions(tokenizer):
    from agentic_rl.engines.scripted import ScriptedBackend
    from agentic_rl.rollout import rollout

    call = '<tool_call>\n{"name": "python", "arguments": {"code": "april = 48\\nmay = april // 2\\nprint(april + may)"}}\n</tool_call>'
    backend = ScriptedBackend(tokenizer, [call, "<answer>72</answer>"])
    made = []

    def make_env():
        env = envs.make("gsm8k", path=GSM8K, num_tasks=4)
        made.append(env)
        return env

    groups = rollout(backend, make_env, [0], group_size=2)
    trajectories = groups[0].trajectories
    assert all(t.reward == 1.0 and t.correct for t in trajectories)
    assert all(t.tool_results[0].ok for t in trajectories)
    # The observation (interpreter output) is never trained on.
    for t in trajectories:
        turn = t.turns[0]
        assert set(t.loss_mask[turn.response_end : turn.observation_end]) == {0}
    assert all(env.tools.get("python").session is None for env in made), "engine did not close the env"


def test_sandbox_failures_are_infra_errors_not_policy_failures(monkeypatch):
    """A sandbox failure raises SandboxError (the episode masks the trajectory as an infra
    error); the code's own errors stay observations."""
    tool = make_python_tool(timeout_s=2)
    try:
        assert not tool.invoke(py("1/0")).ok  # the policy's error: an observation
        broken = sandbox.ExecutionResult(
            status="killed", stderr="sandbox worker died or hung; it was killed", infra_error=True
        )
        monkeypatch.setattr(sandbox.PythonSession, "run", lambda self, code, **kw: broken)
        with pytest.raises(sandbox.SandboxError, match="worker died"):
            tool.invoke(py("print(1)"))

        def fail(self, code, **kw):
            raise OSError("no more processes")

        monkeypatch.setattr(sandbox.PythonSession, "run", fail)
        with pytest.raises(sandbox.SandboxError, match="no more processes"):
            tool.invoke(py("print(1)"))
    finally:
        tool.close()


def test_a_tool_sandbox_failure_becomes_the_trajectory_infra_error(monkeypatch):
    from agentic_rl.envs.tool_env import ToolEnv

    broken = sandbox.ExecutionResult(status="killed", stderr="sandbox worker is not running", infra_error=True)
    monkeypatch.setattr(sandbox.PythonSession, "run", lambda self, code, **kw: broken)
    env = ToolEnv.__new__(ToolEnv)
    from agentic_rl.tools.registry import ToolRegistry

    env.tools = ToolRegistry([make_python_tool(timeout_s=1)])
    with pytest.raises(sandbox.SandboxError):
        env._run_tools([py("print(1)")])

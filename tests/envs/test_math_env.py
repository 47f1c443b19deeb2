"""Math envs: the ReTool format end to end, few-shot demonstrations, tool choices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_rl import envs
from agentic_rl.envs.math_python import DEMO_PROBLEMS
from agentic_rl.rewards import extract_tag, math_equivalent

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k" / "train.jsonl"
needs_gsm8k = pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present")

RETOOL_CALL = (
    "April is 48, May is half.\n<code>\n```python\napril = 48\nmay = april // 2\nprint(april + may)\n```\n</code>"
)


@pytest.fixture
def tasks(tmp_path) -> str:
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"question": "What is 6*7?", "answer": "6*7 = <<6*7=42>>42\n#### 42"},
        {"question": "Half of 9?", "answer": "#### 4.5"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_retool_env_step_runs_code_and_wraps_output(tasks):
    env = envs.make("math-python", path=tasks, parser="retool", timeout_s=2, max_output_chars=60)
    try:
        assert "<code>\n```python" in env.system_prompt and "<interpreter>" in env.system_prompt
        env.reset(options={"task_index": 0})
        observations, reward, terminated, truncated, info = env.step(
            {"role": "assistant", "content": "<code>\n```python\nv = 6 * 7\nprint(v)\n```\n</code>"}
        )
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert observations == [{"role": "tool", "name": "python", "content": "<interpreter>\n42\n</interpreter>"}]
        # State persists across blocks (the notebook loop); long output is cut with a marker.
        observations, *_ = env.step({"role": "assistant", "content": "<code>print(str(v) * 100)</code>"})
        content = observations[0]["content"]
        assert content.startswith("<interpreter>\n4242") and content.endswith("4242\n</interpreter>")
        assert "[output truncated: 140 more characters]" in content
        # A malformed block is an error observation in the same tags, and is not run.
        observations, _, terminated, _, info = env.step(
            {"role": "assistant", "content": "<code>```python\nprint(1)\n</code>"}
        )
        assert not terminated and info["tool_results"][0].malformed
        assert observations[0]["content"].startswith("<interpreter>\nError: unclosed ``` fence")
        _, reward, terminated, _, info = env.step({"role": "assistant", "content": "So <answer>42</answer>"})
        assert terminated and reward == 1.0 and info["correct"]
    finally:
        env.close()


def test_retool_needs_the_python_tool(tasks):
    with pytest.raises(ValueError, match="retool format runs python"):
        envs.make("math-python", path=tasks, parser="retool", tools=["calculator"])


@pytest.mark.parametrize(
    ("parser", "tools"), [("hermes", ["python"]), ("retool", ["python"]), ("hermes", ["calculator"])]
)
def test_few_shot_demonstrations_use_real_tool_outputs(tasks, parser, tools):
    env = envs.make("math-python", path=tasks, parser=parser, tools=tools, few_shot=2, timeout_s=5)
    try:
        messages, _ = env.reset(options={"task_index": 0})
    finally:
        env.close()
    roles = [m["role"] for m in messages]
    # system, then demo 1 (two calls), demo 2 (three calls), then the question.
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[1]["content"] == DEMO_PROBLEMS[0]["question"] and messages[-1]["content"] == "What is 6*7?"
    first_call = env.parser.parse(messages[2]["content"]).calls[0]
    if tools == ["python"]:
        assert first_call.arguments == {"code": "print(24/6)"} and "4.0" in messages[3]["content"]
    else:
        assert first_call.arguments == {"expression": "24/6"} and "\n4\n" in messages[3]["content"]
    wrap = "<interpreter>" if parser == "retool" else "<tool_response>"
    assert all(m["content"].startswith(wrap) for m in messages if m["role"] == "tool")
    # Each demo ends in the env's answer format, and the env's own reward accepts it.
    for demo_end, problem in ((messages[6], DEMO_PROBLEMS[0]), (messages[14], DEMO_PROBLEMS[1])):
        answer = extract_tag(demo_end["content"], env.answer_tag)
        assert math_equivalent(answer, problem["answer"].rsplit("####", 1)[1].strip())


def test_few_shot_without_tools_shows_reasoning_only(tasks):
    env = envs.make("math-python", path=tasks, tools=[], few_shot=1)
    messages, _ = env.reset(options={"task_index": 0})
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert (
        messages[2]["content"]
        == "Each morning she fills 24/6 = 4 boxes.\nIn 5 mornings she fills 4*5 = 20 boxes.\n<answer>20</answer>"
    )
    with pytest.raises(ValueError, match=r"few_shot: expected an int in \[0, 4\]"):
        envs.make("math-python", path=tasks, few_shot=5)


def test_answer_scored_by_math_equivalence(tasks):
    env = envs.make("math-python", path=tasks, tools=[])
    env.reset(options={"task_index": 1})
    assert env.step({"role": "assistant", "content": "<answer>\\frac{9}{2}</answer>"})[1] == 1.0
    env.reset(options={"task_index": 1})
    assert env.step({"role": "assistant", "content": "<answer>4.6</answer>"})[1] == 0.0


@needs_gsm8k
def test_gsm8k_retool_rollout_with_scripted_backend(tokenizer):
    from agentic_rl.engines.scripted import ScriptedBackend
    from agentic_rl.rollout import rollout

    backend = ScriptedBackend(tokenizer, [RETOOL_CALL, "So 72 clips. <answer>72</answer>"])
    made = []

    def make_env():
        made.append(envs.make("gsm8k", path=str(GSM8K), num_tasks=2, parser="retool", few_shot=1))
        return made[-1]

    trajectory = rollout(backend, make_env, [0], group_size=1)[0].trajectories[0]
    assert trajectory.reward == 1.0 and trajectory.correct and trajectory.num_turns == 2
    assert trajectory.tool_results[0].ok and trajectory.tool_results[0].content == "72"
    turn = trajectory.turns[0]
    observation = tokenizer.decode(trajectory.token_ids[turn.response_end : turn.observation_end])
    assert "<interpreter>\n72\n</interpreter>" in observation
    assert set(trajectory.loss_mask[turn.response_end : turn.observation_end]) == {0}  # never trained on
    sampled = tokenizer.decode([t for t, m in zip(trajectory.token_ids, trajectory.loss_mask) if m])
    assert "<code>" in sampled and "<interpreter>" not in sampled
    assert all(env.tools.get("python").session is None for env in made), "the engine did not release the session"

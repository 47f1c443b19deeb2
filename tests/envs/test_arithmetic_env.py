"""The arithmetic env: seeded tasks, disjoint splits, knobs, demos, rewards, tool turns."""

from __future__ import annotations

import json
import re

import pytest

from agentic_rl import envs
from agentic_rl.envs import INVALID_CALL, ArithmeticTasks, ToolEnv, UnknownEnvError, make
from agentic_rl.types import ToolResult


def call(expression, *, name: str = "calculator", **extra) -> str:
    """A well-formed hermes tool call."""
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": {"expression": expression, **extra}})
        + "\n</tool_call>"
    )


def started(env: ToolEnv, index: int = 0):
    messages, info = env.reset(options={"task_index": index})
    return env.tasks[index], messages, info


# ----------------------------------------------------------------- tasks and seeding


def test_same_seed_and_index_give_the_same_task() -> None:
    first, second = make("arithmetic"), make("arithmetic")
    for index in (0, 1, 77, 9_999):
        assert first.reset(options={"task_index": index}) == second.reset(options={"task_index": index})
        assert first.tasks[index] == second.tasks[index]
    # reset(seed=...) draws a task reproducibly
    assert first.reset(seed=123) == second.reset(seed=123)
    assert first.reset(seed=123) == first.reset(seed=123)


def test_different_indices_and_seeds_give_different_tasks() -> None:
    tasks = ArithmeticTasks(split="train")
    prompts = [tasks[i].prompt for i in range(200)]
    assert len(set(prompts)) == 200
    assert len({tasks[i].id for i in range(200)}) == 200
    other_seed = ArithmeticTasks(split="train", seed=1)
    assert all(tasks[i].prompt != other_seed[i].prompt for i in range(50))
    assert tasks[-1] == tasks[len(tasks) - 1]
    with pytest.raises(IndexError):
        tasks[len(tasks)]


def test_splits_are_disjoint() -> None:
    train = ArithmeticTasks(split="train")[:2000]
    test = ArithmeticTasks(split="test")[:1000]
    demo = ArithmeticTasks(split="demo")[:16]
    assert len(ArithmeticTasks(split="test")) == 1000 and len(ArithmeticTasks(split="demo")) == 16
    train_prompts, test_prompts = {t.prompt for t in train}, {t.prompt for t in test}
    demo_prompts = {t.prompt for t in demo}
    assert not train_prompts & test_prompts
    assert not demo_prompts & (train_prompts | test_prompts)
    train_ids, test_ids, demo_ids = {t.id for t in train}, {t.id for t in test}, {t.id for t in demo}
    assert len(train_ids) == 2000 and len(test_ids) == 1000
    assert not train_ids & test_ids and not demo_ids & (train_ids | test_ids)
    # Same index, different split: a different problem.
    assert train[0].prompt != test[0].prompt


def test_answers_are_correct() -> None:
    for split in ("train", "test"):
        for task in ArithmeticTasks(split=split)[:300]:
            expression = task.metadata["expression"]
            assert re.fullmatch(r"\d+( [-+*] \d+)+", expression)  # only digits and + - *: eval is safe
            assert task.answer == str(eval(expression))  # noqa: S307
            assert task.prompt == f"What is {expression}?"


def operands_and_operators(expression: str) -> tuple[list[str], list[str]]:
    tokens = expression.split(" ")
    return tokens[0::2], tokens[1::2]


@pytest.mark.parametrize(
    ("knobs", "digits", "count", "allowed"),
    [
        ({}, 3, 3, set("+-*")),
        ({"digits": 1, "num_operands": 2, "operators": "+"}, 1, 2, {"+"}),
        ({"digits": 5, "num_operands": 6, "operators": "*-"}, 5, 6, {"*", "-"}),
        ({"digits": 12, "num_operands": 8, "operators": "-"}, 12, 8, {"-"}),
    ],
)
def test_knobs_shape_the_expression(knobs, digits, count, allowed) -> None:
    env = make("arithmetic", **knobs)
    seen_operators: set[str] = set()
    for index in range(100):
        task = env.tasks[index]
        operands, operators = operands_and_operators(task.metadata["expression"])
        assert len(operands) == count and len(operators) == count - 1
        assert all(len(o) == digits and o.isdigit() and o[0] != "0" for o in operands)
        assert set(operators) <= allowed
        seen_operators |= set(operators)
        assert task.answer == str(eval(task.metadata["expression"]))  # noqa: S307
    assert seen_operators == allowed  # every allowed operator actually occurs


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"digits": 0}, "digits"),
        ({"digits": 13}, "digits"),
        ({"num_operands": 1}, "num_operands"),
        ({"num_operands": 9}, "num_operands"),
        ({"operators": ""}, "operators"),
        ({"operators": "+/"}, "operators"),
        ({"split": "validation"}, "split"),
        ({"phrasing": "latex"}, "phrasing"),
        ({"phrasing": "words", "reversed_steps": 1.5}, "reversed_steps"),
        ({"reversed_steps": 1.0}, "reversed_steps"),  # symbols phrasing has no reversed steps
        ({"phrasing": "words", "operators": "+*", "reversed_steps": 0.0}, "reversed_steps"),
        ({"num_tasks": 0}, "num_tasks"),
        ({"few_shot": -1}, "few_shot"),
        ({"few_shot": 17}, "few_shot"),
        ({"max_turns": 0}, "max_turns"),
        ({"tools": [], "demo_style": "tool"}, "demo_style"),
    ],
)
def test_invalid_knobs_raise_value_error_naming_the_field(knobs, field) -> None:
    with pytest.raises(ValueError, match=rf"^{field}\b"):
        make("arithmetic", **knobs)


def _follow_the_words(prompt: str) -> int:
    """Read a words-phrased problem step by step, independently of the generator."""
    match = re.fullmatch(r"Start with (\d+), (.*)\. What is the result\?", prompt)
    assert match, prompt
    value = int(match.group(1))
    for step in match.group(2).split(", then "):
        n = int(step.split()[-1])
        if step.startswith(("add", "increase")):
            value += n
        elif step.startswith(("subtract it from", "take it away from")):
            value = n - value
        elif step.startswith(("subtract", "decrease")):
            value -= n
        else:
            assert step.startswith("multiply"), step
            value *= n
    return value


def test_words_phrasing_states_steps_whose_expression_gives_the_answer() -> None:
    tasks = ArithmeticTasks(split="train", phrasing="words", num_operands=3)[:300]
    assert tasks[0].prompt == "Start with 274, take it away from 100, then multiply it by 603. What is the result?"
    assert tasks[0].metadata["expression"] == "(100 - 274) * 603" and tasks[0].answer == "-104922"
    reversed_steps = 0
    for task in tasks:
        assert task.id.startswith("arithmetic-words-train-0-")
        assert task.answer == str(_follow_the_words(task.prompt)) == str(eval(task.metadata["expression"]))  # noqa: S307
        reversed_steps += "it from" in task.prompt or "away from" in task.prompt
    assert reversed_steps > 20  # the order-reversing step occurs
    # the symbols phrasing keeps its own tasks; the test split stays disjoint
    assert ArithmeticTasks(split="train")[0].prompt == "What is 398 * 830 + 650?"
    test = {t.prompt for t in ArithmeticTasks(split="test", phrasing="words")[:1000]}
    assert not test & {t.prompt for t in ArithmeticTasks(split="train", phrasing="words")[:2000]}


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_reversed_steps_sets_the_share_of_order_reversing_subtractions(share) -> None:
    tasks = ArithmeticTasks(split="train", phrasing="words", operators="-", reversed_steps=share)[:50]
    for task in tasks:
        assert task.answer == str(_follow_the_words(task.prompt)) == str(eval(task.metadata["expression"]))  # noqa: S307
        steps = task.prompt.split(", ", 1)[1].split(", then ")
        assert sum(" from " in step for step in steps) == (len(steps) if share else 0)
    # the default share keeps the tasks each seed always had
    assert (
        ArithmeticTasks(split="train", phrasing="words", reversed_steps=0.5)[0].prompt
        == ArithmeticTasks(split="train", phrasing="words")[0].prompt
    )


def test_words_demonstrations_call_the_calculator_with_the_parenthesized_expression() -> None:
    env = make("arithmetic", phrasing="words", few_shot=2)
    messages, _ = env.reset(options={"task_index": 0})
    demo = ArithmeticTasks(split="demo", phrasing="words")[0]
    assert messages[1]["content"] == demo.prompt
    assert json.loads(messages[2]["content"].split("<tool_call>")[1].split("</tool_call>")[0])["arguments"] == {
        "expression": demo.metadata["expression"]
    }


def test_num_tasks_limits_the_split() -> None:
    env = make("arithmetic", num_tasks=5)
    assert env.num_tasks == 5
    assert {env.reset(seed=s)[1]["task_id"] for s in range(100)} <= {f"arithmetic-train-0-{i}" for i in range(5)}


# ----------------------------------------------------------------- prompts and demos


def test_opening_messages_without_demos() -> None:
    env = make("arithmetic")
    task, messages, info = started(env, 3)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[-1]["content"] == task.prompt
    assert info["task_id"] == task.id == "arithmetic-train-0-3"
    system = messages[0]["content"]
    assert "<tools>" in system and '"name": "calculator"' in system and "<tool_call>" in system
    assert "<answer>" in system


def test_few_shot_demonstrations_are_earlier_turns() -> None:
    env = make("arithmetic", few_shot=2)
    task, messages, _ = started(env, 0)
    roles = [m["role"] for m in messages]
    assert roles == ["system"] + ["user", "assistant", "tool", "assistant"] * 2 + ["user"]
    assert messages[-1]["content"] == task.prompt
    demos = ArithmeticTasks(split="demo")[:2]
    for demo, block in zip(demos, (messages[1:5], messages[5:9])):
        user, tool_call, tool_result, answer = block
        assert user["content"] == demo.prompt
        parsed = env.parser.parse(tool_call["content"])
        assert parsed.errors == [] and len(parsed.calls) == 1
        assert parsed.calls[0].name == "calculator"
        assert parsed.calls[0].arguments == {"expression": demo.metadata["expression"]}
        assert tool_result["content"] == f"<tool_response>\n{demo.answer}\n</tool_response>"
        assert answer["content"] == f"<answer>{demo.answer}</answer>"
    # Demonstrations are never train or test tasks.
    demo_prompts = {m["content"] for m in messages[1:-1] if m["role"] == "user"}
    assert len(demo_prompts) == 2
    assert not demo_prompts & {t.prompt for t in ArithmeticTasks(split="train")[:2000]}
    assert not demo_prompts & {t.prompt for t in ArithmeticTasks(split="test")[:1000]}
    # The same demonstrations precede every task.
    _, other, _ = started(env, 1)
    assert other[:-1] == messages[:-1] and other[-1] != messages[-1]


def test_no_tools_gives_answer_demos_and_no_tools_prompt() -> None:
    env = make("arithmetic", tools=[], few_shot=3)
    assert len(env.tools) == 0
    task, messages, _ = started(env, 0)
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    system = messages[0]["content"]
    assert "<tools>" not in system and "tool_call" not in system and "calculator" not in system
    assert "<answer>" in system
    for demo, answer in zip(ArithmeticTasks(split="demo")[:3], messages[2:-1:2]):
        assert answer == {"role": "assistant", "content": f"<answer>{demo.answer}</answer>"}
    # A tool call without tools is just an answer-less reply: the episode ends with 0.
    observations, reward, terminated, truncated, info = env.step({"role": "assistant", "content": call("1+1")})
    assert (observations, reward, terminated, truncated) == ([], 0.0, True, False)
    assert info["tool_results"] == []


def test_custom_system_prompt_keeps_the_tools_section() -> None:
    env = make("arithmetic", system_prompt="Be brief.")
    _, messages, _ = started(env)
    assert messages[0]["content"].startswith("Be brief.\n\n")
    assert "<tools>" in messages[0]["content"]


# ----------------------------------------------------------------- rewards and steps


@pytest.mark.parametrize(
    ("reply", "reward", "correct"),
    [
        ("<answer>{answer}</answer>", 1.0, True),
        ("The result is <answer> {answer} </answer>.", 1.0, True),
        ("<answer>{wrong}</answer>", 0.0, False),
        ("<answer>{answer}</answer> no wait <answer>{wrong}</answer>", 0.0, False),  # the last answer counts
        ("<answer>banana</answer>", 0.0, False),
        ("<answer></answer>", 0.0, False),
        ("I think it is {answer}.", 0.0, False),  # no answer tag
    ],
)
def test_reward(reply: str, reward: float, correct: bool) -> None:
    env = make("arithmetic")
    task, _, _ = started(env, 5)
    text = reply.format(answer=task.answer, wrong=int(task.answer) + 1)
    observations, got_reward, terminated, truncated, info = env.step({"role": "assistant", "content": text})
    assert observations == []
    assert got_reward == reward and isinstance(got_reward, float)
    assert terminated is True and truncated is False
    assert info["correct"] is correct


def test_answer_and_tool_call_in_one_turn_ends_with_the_answer() -> None:
    env = make("arithmetic")
    task, _, _ = started(env)
    text = call(task.metadata["expression"]) + f"\n<answer>{task.answer}</answer>"
    observations, reward, terminated, truncated, info = env.step({"role": "assistant", "content": text})
    assert (observations, reward, terminated, truncated) == ([], 1.0, True, False)
    assert info["answer"] == task.answer


def test_tool_call_returns_observation_and_continues() -> None:
    env = make("arithmetic")
    task, _, _ = started(env, 2)
    observations, reward, terminated, truncated, info = env.step(
        {"role": "assistant", "content": "Let me compute.\n" + call(task.metadata["expression"])}
    )
    assert observations == [
        {"role": "tool", "name": "calculator", "content": f"<tool_response>\n{task.answer}\n</tool_response>"}
    ]
    assert (reward, terminated, truncated) == (0.0, False, False)
    [result] = info["tool_results"]
    assert isinstance(result, ToolResult)
    assert (result.name, result.content, result.ok, result.malformed) == ("calculator", task.answer, True, False)
    assert info["correct"] is False and info["answer"] is None
    # ... and the answer on the next turn is scored.
    observations, reward, terminated, truncated, info = env.step(
        {"role": "assistant", "content": f"<answer>{task.answer}</answer>"}
    )
    assert (observations, reward, terminated, truncated, info["correct"]) == ([], 1.0, True, False, True)


def test_several_calls_in_one_turn_each_get_a_result() -> None:
    env = make("arithmetic")
    started(env)
    observations, _, terminated, _, info = env.step(
        {"role": "assistant", "content": call("2 + 3") + call("6 * 7") + call("10 - 1")}
    )
    assert not terminated
    assert [o["content"] for o in observations] == [f"<tool_response>\n{v}\n</tool_response>" for v in ("5", "42", "9")]
    assert [r.content for r in info["tool_results"]] == ["5", "42", "9"]
    assert all(r.ok and not r.malformed for r in info["tool_results"])


def test_oversized_call_is_a_malformed_call_and_not_run() -> None:
    env = make("arithmetic", max_argument_chars=200)
    started(env)
    observations, _, terminated, _, info = env.step(
        {"role": "assistant", "content": call("2 + 3") + call("+".join(["1"] * 200))}
    )
    assert not terminated
    short, long = info["tool_results"][1], info["tool_results"][0]  # parse errors come first
    assert (short.name, short.content, short.ok) == ("calculator", "5", True)
    assert (long.name, long.malformed) == (INVALID_CALL, True) and "at most 200 are allowed" in long.content
    assert len(observations) == 2


def test_failing_tool_is_not_malformed() -> None:
    env = make("arithmetic")
    started(env)
    observations, reward, terminated, _, info = env.step({"role": "assistant", "content": call("1 / 0")})
    [result] = info["tool_results"]
    assert (result.ok, result.malformed) == (False, False)
    assert "division by zero" in result.content
    assert "division by zero" in observations[0]["content"]
    assert (reward, terminated) == (0.0, False)


@pytest.mark.parametrize(
    ("text", "name", "error"),
    [
        (
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"\n</tool_call>',
            INVALID_CALL,
            "invalid JSON",
        ),
        ("<tool_call>not json at all</tool_call>", INVALID_CALL, "invalid JSON"),
        (call("1+1", name="search"), "search", "unknown tool 'search'"),
        (call(5), "calculator", "argument 'expression' must be string"),
        (call("1+1", precision=3), "calculator", "unexpected argument 'precision'"),
        (
            '<tool_call>\n{"name": "calculator", "arguments": {}}\n</tool_call>',
            "calculator",
            "missing required argument 'expression'",
        ),
        (
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}',
            INVALID_CALL,
            "unclosed <tool_call>",
        ),
    ],
)
def test_malformed_call_gives_error_observation(text: str, name: str, error: str) -> None:
    env = make("arithmetic")
    started(env)
    observations, reward, terminated, truncated, info = env.step({"role": "assistant", "content": text})
    assert (reward, terminated, truncated) == (0.0, False, False)  # the episode goes on
    [result] = info["tool_results"]
    assert result.name == name
    assert result.ok is False and result.malformed is True
    assert result.content.startswith("Error: ") and error in result.content
    [observation] = observations
    assert observation["role"] == "tool"
    assert observation["content"] == f"<tool_response>\n{result.content}\n</tool_response>"


def test_too_many_calls_runs_the_first_ones_and_reports_the_rest() -> None:
    env = make("arithmetic", max_calls_per_turn=2)
    started(env)
    text = "".join(call(f"{i} + 1") for i in range(5))
    observations, _, terminated, _, info = env.step({"role": "assistant", "content": text})
    assert not terminated
    results = info["tool_results"]
    assert len(results) == len(observations) == 3
    malformed = [r for r in results if r.malformed]
    assert len(malformed) == 1 and malformed[0].name == INVALID_CALL and not malformed[0].ok
    assert "too many tool calls" in malformed[0].content and "3 were not executed" in malformed[0].content
    assert sorted(r.content for r in results if not r.malformed) == ["1", "2"]


def test_max_turns_truncates() -> None:
    env = make("arithmetic", max_turns=2)
    task, _, _ = started(env)
    tool_turn = {"role": "assistant", "content": call(task.metadata["expression"])}
    _, _, terminated, truncated, _ = env.step(tool_turn)
    assert (terminated, truncated) == (False, False)
    observations, reward, terminated, truncated, _ = env.step(tool_turn)
    assert (terminated, truncated, reward) == (False, True, 0.0)
    assert observations  # the tool still ran; the engine decides to stop
    # reset starts a fresh episode with a fresh turn count
    started(env, 1)
    assert env.step(tool_turn)[3] is False


def test_step_before_reset_raises() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        make("arithmetic").step({"role": "assistant", "content": "<answer>1</answer>"})


# ----------------------------------------------------------------- registry


def test_make_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(
        UnknownEnvError, match=r"unknown env 'arithmetc' \(did you mean 'arithmetic'\?\); registered envs: .*arithmetic"
    ):
        make("arithmetc")
    with pytest.raises(KeyError):  # UnknownEnvError is a KeyError
        make("zzzz")


def test_make_unknown_option_names_it_and_lists_options() -> None:
    with pytest.raises(
        TypeError, match=r"env 'arithmetic' has no option 'digit' \(did you mean 'digits'\?\); options: .*digits"
    ):
        make("arithmetic", digit=2)


def test_registered_lists_arithmetic() -> None:
    entries = {entry.name: entry for entry in envs.registered()}
    assert "arithmetic" in entries
    assert entries["arithmetic"].description
    assert entries["arithmetic"].factory is envs.make_arithmetic_env
    with pytest.raises(ValueError, match="already registered"):
        envs.register("arithmetic", envs.make_arithmetic_env)
    assert isinstance(make("arithmetic"), envs.Env)

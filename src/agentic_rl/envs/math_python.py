"""``math-python`` / ``gsm8k``: word problems from any JSONL, solved with a sandboxed
``python`` tool, scored by mathematical equivalence (``math-verify``).

The package ships no data: pass ``path`` (e.g. GSM8K's ``train.jsonl``). GSM8K answers
(reasoning, then ``#### N``) are understood: the gold answer is the part after ``####``.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_rl.envs.base import Task
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import get_parser
from agentic_rl.rewards import numeric_match
from agentic_rl.tools import ToolRegistry, get_tool
from agentic_rl.tools.python_tool import make_python_tool

DEFAULT_SYSTEM_PROMPT = (
    "You solve math word problems. Use the python tool to compute (print the values you need), "
    "then give the final answer as <answer>NUMBER</answer>."
)


def gold_answer(text: str) -> str:
    """The final answer of a gold solution: the part after GSM8K's ``####`` if present."""
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip().replace(",", "")


def math_equivalent(prediction: str | None, gold: str) -> bool:
    """True when ``prediction`` equals ``gold`` mathematically (math-verify; plain numbers
    fall back to exact numeric comparison if math-verify is unavailable or fails)."""
    if prediction is None or not prediction.strip():
        return False
    if numeric_match(prediction, gold):
        return True
    try:
        import logging

        from math_verify import parse, verify

        logging.getLogger("math_verify").setLevel(logging.ERROR)

        # Timeouts off: math-verify's timeouts use SIGALRM, which only works on the main
        # thread, and env steps run on worker threads.
        gold_parsed = parse(f"${gold}$", parsing_timeout=None)
        predicted = parse(prediction if "$" in prediction or "\\" in prediction else f"${prediction}$", parsing_timeout=None)
        return bool(gold_parsed and predicted and verify(gold_parsed, predicted, timeout_seconds=None))
    except Exception:
        return False


def math_reward(answer: str | None, task: Task) -> float:
    return 1.0 if math_equivalent(answer, task.answer) else 0.0


def load_math_tasks(path: str, *, question_field: str = "question", answer_field: str = "answer", name: str = "math", num_tasks: int | None = None) -> list[Task]:
    from agentic_rl.data.conversations import read_jsonl

    rows = read_jsonl(path)
    tasks = []
    for index, row in enumerate(rows[: num_tasks or None]):
        if question_field not in row or answer_field not in row:
            raise ValueError(f"{path}: row {index + 1} lacks {question_field!r} or {answer_field!r}; set question_field / answer_field")
        solution = str(row[answer_field])
        tasks.append(Task(id=f"{name}-{index}", prompt=str(row[question_field]), answer=gold_answer(solution), metadata={"solution": solution}))
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


def make_math_python_env(
    *,
    path: str | None = None,
    question_field: str = "question",
    answer_field: str = "answer",
    split: str | None = None,
    num_tasks: int | None = None,
    tools: Sequence[str] = ("python",),
    parser: str = "hermes",
    max_turns: int = 4,
    system_prompt: str | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_chars: int = 1024,
    name: str = "math",
) -> ToolEnv:
    """Math word problems from a JSONL file, with a sandboxed stateful ``python`` tool.

    ``split`` is accepted for the eval harness and ignored: the file is the split.
    """
    if not path:
        raise ValueError(f"{name}: set env.path to a JSONL file (this package ships no data)")
    registry = ToolRegistry(
        make_python_tool(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=max_output_chars) if tool_name == "python" else get_tool(tool_name)
        for tool_name in tools
    )
    return ToolEnv(
        _cached_tasks(path, question_field, answer_field, name, num_tasks),
        registry,
        parser=get_parser(parser),
        reward_fn=math_reward,
        max_turns=max_turns,
        system_prompt=DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt,
    )


_CACHE: dict = {}


def _cached_tasks(path, question_field, answer_field, name, num_tasks):
    key = (path, question_field, answer_field, name, num_tasks)
    if key not in _CACHE:  # envs are built per trajectory: parse the file once
        _CACHE[key] = load_math_tasks(path, question_field=question_field, answer_field=answer_field, name=name, num_tasks=num_tasks)
    return _CACHE[key]


def make_gsm8k_env(*, path: str | None = None, split: str | None = None, num_tasks: int | None = None, parser: str = "hermes", max_turns: int = 4, timeout_s: float = 5.0, max_output_chars: int = 1024, tools: Sequence[str] = ("python",), system_prompt: str | None = None) -> ToolEnv:
    """GSM8K (``question`` / ``answer`` with ``#### N``) from a path you give, with the python tool."""
    return make_math_python_env(path=path, split=split, num_tasks=num_tasks, parser=parser, max_turns=max_turns, timeout_s=timeout_s, max_output_chars=max_output_chars, tools=tools, system_prompt=system_prompt, name="gsm8k")

"""``code``: write a Python function that passes hidden unit tests.

The model may run code with the sandboxed ``python`` tool first; a turn without tool
calls is the final answer, whose last ```python fenced block is scored by running the
task's tests in a fresh sandboxed process (:mod:`agentic_rl.rewards.unit_tests`, which
documents the reward-hacking guards). Reward 1 when every test passes, else 0; with
``partial_credit`` the fraction of tests passed.

Test progress (``test_progress``): a python tool turn whose code (re)defines the entry
point runs the task's tests, in a fresh sandbox, on every cell the episode has run without
error so far (the session's definitions); the turn reports the ``test_progress`` term
(``info["turn_terms"]``, weighed by ``reward.terms``): the rise in the best fraction of
tests passed so far. Running the same code again earns nothing, and the whole episode
reports at most 1. The tests' results are never shown to the model. The runs cost a
sandbox each, so they happen only when the option asks for them.
"""

from __future__ import annotations

import re
from typing import Any

from agentic_rl.envs.base import Task
from agentic_rl.envs.code_tasks import ProceduralCodeTasks, load_humaneval, load_jsonl_tasks
from agentic_rl.envs.terms import RewardTerm
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import get_parser
from agentic_rl.rewards.unit_tests import run_unit_tests
from agentic_rl.tools import ToolRegistry
from agentic_rl.tools.python_tool import make_python_tool
from agentic_rl.types import Message, ToolResult

DATASETS = ("procedural", "humaneval")
SYSTEM_PROMPT = (
    "You write Python functions. You may run code with the python tool to try your solution. "
    "When you are done, reply without tool calls and put the complete function (with any imports it needs) "
    "in a final ```python code block."
)
FENCE = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The last ```python fenced block of ``text`` (None when there is none)."""
    blocks = FENCE.findall(text)
    return blocks[-1] if blocks else None


TEST_PROGRESS_TERM = RewardTerm("turn", "rise in the best fraction of tests passed (with test_progress)")


class CodeEnv(ToolEnv):
    """A ``ToolEnv`` whose answer is the last python block of the first turn without tool calls."""

    def __init__(
        self,
        tasks,
        tools,
        *,
        partial_credit: bool = False,
        timeout_s: float = 10.0,
        memory_mb: int = 512,
        test_progress: bool = False,
        **kwargs: Any,
    ) -> None:
        if not isinstance(test_progress, bool):
            raise ValueError(f"test_progress: expected true or false, got {test_progress!r}")
        super().__init__(tasks, tools, **kwargs)
        self.partial_credit = partial_credit
        self.test_timeout_s = timeout_s
        self.test_memory_mb = memory_mb
        self.test_progress = test_progress
        if test_progress:
            self.reward_terms["test_progress"] = TEST_PROGRESS_TERM
        self._reset_progress()

    def _reset_progress(self) -> None:
        self.cells: list[str] = []
        """Code of the python calls that ran without error this episode, in order."""
        self.best_fraction = 0.0
        """Best fraction of tests an intermediate run passed this episode."""
        self.progress: dict[str, float] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self._reset_progress()
        return super().reset(seed=seed, options=options)

    def record_calls(self, calls, call_results: list[ToolResult], results: list[ToolResult]) -> None:
        self.progress = {}
        defines = False
        for call, result in zip(calls, call_results):
            code = call.arguments.get("code") if call.name == "python" and isinstance(call.arguments, dict) else None
            if isinstance(code, str) and result.ok:
                self.cells.append(code)
                defines = defines or _defines(code, self.task.metadata["entry_point"])  # type: ignore[union-attr]
        if self.test_progress and defines:
            fraction = self._tests_fraction("\n\n".join(self.cells))
            self.progress = {"test_progress": max(0.0, fraction - self.best_fraction)}
            self.best_fraction = max(self.best_fraction, fraction)

    def turn_terms(self, calls, call_results: list[ToolResult]) -> dict[str, float]:
        """The rise in the best fraction of tests passed, on a turn that ran them (``test_progress``)."""
        return self.progress

    def _tests_fraction(self, code: str) -> float:
        meta = self.task.metadata  # type: ignore[union-attr]
        report = run_unit_tests(
            code,
            prompt=meta["prompt"],
            test=meta["test"],
            entry_point=meta["entry_point"],
            timeout_s=self.test_timeout_s,
            memory_mb=self.test_memory_mb,
        )
        return report.fraction

    def score_answer(self, answer: str | None) -> tuple[float, bool, dict[str, Any]]:
        task: Task = self.task  # type: ignore[assignment]
        if not answer or not answer.strip():
            return 0.0, False, {"tests_passed": 0, "tests_total": 0}
        meta = task.metadata
        report = run_unit_tests(
            answer,
            prompt=meta["prompt"],
            test=meta["test"],
            entry_point=meta["entry_point"],
            timeout_s=self.test_timeout_s,
            memory_mb=self.test_memory_mb,
        )
        reward = 1.0 if report.all_passed else (report.fraction if self.partial_credit else 0.0)
        return reward, report.all_passed, {"tests_passed": report.passed, "tests_total": report.total}

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("step() called before reset()")
        self.turn += 1
        text = assistant_message.get("content") or ""
        parsed = self.parser.parse(text) if len(self.tools) else None
        if parsed is None or not parsed.has_calls:
            return self.answer_turn(extract_code(text))
        return self.tool_turn(parsed)

    def expert_reply(self) -> str:
        """The scripted expert's answer: the task's canonical solution (the prompt and its
        body) in a final python block (cold-start data, ``sft.collect.source: expert``)."""
        if self.task is None:
            raise ValueError("expert_reply: no task is loaded (call reset first)")
        if not self.task.answer:
            raise ValueError(f"expert_reply: task {self.task.id} has no canonical_solution to answer with")
        return f"```python\n{self.task.answer.rstrip()}\n```"

    def verdict(self, answer: str | None) -> str:
        """After a failed attempt (``attempts`` > 1): that it failed, never the tests."""
        return (
            "Your reply had no ```python code block."
            if not answer or not answer.strip()
            else "Your code does not pass the tests."
        )


def _defines(code: str, entry_point: str) -> bool:
    """Whether ``code`` has a ``def entry_point(`` line."""
    return re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, flags=re.MULTILINE) is not None


_CACHE: dict = {}


def _tasks(dataset: str, path: str | None, split: str | None, num_tasks: int | None, seed: int):
    if path:
        key = ("path", path, num_tasks)
        if key not in _CACHE:  # envs are built per trajectory: read the file once
            _CACHE[key] = load_jsonl_tasks(path, num_tasks=num_tasks)
        return _CACHE[key]
    if dataset == "humaneval":
        if ("humaneval", num_tasks) not in _CACHE:
            _CACHE["humaneval", num_tasks] = load_humaneval(num_tasks)
        return _CACHE["humaneval", num_tasks]
    # A test split of procedural tasks draws from another seed stream than train.
    return ProceduralCodeTasks(num_tasks or 10000, seed=seed + (1_000_003 if split == "test" else 0))


def make_code_env(
    *,
    dataset: str | None = None,
    path: str | None = None,
    split: str | None = None,
    num_tasks: int | None = None,
    seed: int = 0,
    partial_credit: bool = False,
    test_progress: bool = False,
    tools: tuple[str, ...] | list[str] = ("python",),
    parser: str = "hermes",
    max_turns: int = 4,
    system_prompt: str | None = None,
    timeout_s: float = 5.0,
    test_timeout_s: float = 10.0,
    memory_mb: int = 512,
    max_output_chars: int = 1024,
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
    memory: str | dict | bool | None = None,
) -> CodeEnv:
    """Function-writing tasks scored by unit tests in the sandbox; optional python tool.

    Args:
        dataset: ``procedural`` (seeded generated tasks; the default, except for split test)
            or ``humaneval`` (the 164 HumanEval problems, needs the ``[code]`` extra; the
            default for split test). Not together with ``path``.
        path: A JSONL file of tasks in HumanEval's shape to use instead of ``dataset``: each row
            has ``prompt``, ``test`` and ``entry_point``, optionally ``task_id`` and
            ``canonical_solution`` (what the scripted expert answers with).
        split: Not a split of the data: ``test`` makes ``humaneval`` the default ``dataset`` and
            draws procedural tasks from a seed stream other than train's (same ``seed``, which
            only procedural tasks use); any other value (or unset) is train. ``path`` ignores it.
        partial_credit: When the final answer fails some tests, reward the fraction of tests
            passed instead of 0.
        test_progress: Run the tests after each python turn that defines the entry point and
            report the ``test_progress`` turn term (the rise in the best fraction passed; see
            the module docstring), which ``reward.terms.test_progress`` weighs.
        tools: ``["python"]`` (the sandboxed python tool, to try code before answering) or
            ``[]`` (no tool: the first reply is the answer); no other tool is offered.
        parser: The tool-call format: ``hermes`` (up to 4 python calls per turn) or ``retool``
            (code in ``<code>```python ...```</code>`` tags, one block per turn).
        test_timeout_s: Wall-time limit in seconds (above 0) for one run of the task's tests,
            on the final answer or for ``test_progress``; ``timeout_s`` bounds each
            python tool call instead.
    """
    if dataset is not None and dataset not in DATASETS:
        raise ValueError(f"dataset: expected one of {', '.join(DATASETS)}, got {dataset!r}")
    if dataset is not None and path:
        raise ValueError("path: give either dataset or path, not both")
    if set(tools) - {"python"}:
        raise ValueError(f"tools: only 'python' is offered, got {list(tools)!r}")
    if parser not in ("hermes", "retool"):
        raise ValueError(f"parser: expected hermes or retool, got {parser!r}")
    if test_timeout_s <= 0:
        raise ValueError(f"test_timeout_s: expected a positive number, got {test_timeout_s}")
    chosen = dataset or ("humaneval" if split == "test" else "procedural")
    registry = ToolRegistry(
        make_python_tool(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=max_output_chars) for _ in tools
    )
    return CodeEnv(
        _tasks(chosen, path, split, num_tasks, seed),
        registry,
        parser=get_parser(parser, max_calls_per_turn=1 if parser == "retool" else 4),
        max_turns=max_turns,
        system_prompt=SYSTEM_PROMPT if system_prompt is None else system_prompt,
        partial_credit=partial_credit,
        test_progress=test_progress,
        timeout_s=test_timeout_s,
        memory_mb=memory_mb,
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
    )

"""``ToolEnv``: a task, a set of tools, a call format, a reward and a turn limit."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentic_rl.envs.base import Task
from agentic_rl.parsers import ToolCallParser, get_parser
from agentic_rl.rewards import extract_tag, numeric_match
from agentic_rl.tools import ToolRegistry
from agentic_rl.types import INVALID_CALL, Message, ToolResult

RewardFn = Callable[[str | None, Task], float]


def numeric_reward(answer: str | None, task: Task) -> float:
    return 1.0 if numeric_match(answer, task.answer) else 0.0


class ToolEnv:
    """A multi-turn tool-use episode over a sequence of tasks.

    Each assistant turn either calls tools (the results come back as ``tool`` messages
    and the episode goes on) or answers inside ``<answer_tag>`` (the episode terminates
    and the reward is scored). A reply with neither also ends the episode, scored as a
    missing answer. Reaching ``max_turns`` truncates.

    The tools are described in the system message in the parser's format. A renderer
    whose chat template describes tools itself resets with ``options["tools_prompt"] =
    "template"``: where the parser's format fits a template's description
    (``parser.template_tools``) the system message then leaves them out. The reset info
    says which was done: ``info["tools"]`` (the tools' schemas) and
    ``info["tools_prompt"]`` ("text" or "template").
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        tools: ToolRegistry,
        *,
        parser: ToolCallParser | str = "hermes",
        reward_fn: RewardFn = numeric_reward,
        max_turns: int = 4,
        system_prompt: str = "",
        demonstrations: Sequence[Sequence[Message]] = (),
        answer_tag: str = "answer",
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns: expected a positive int, got {max_turns}")
        self.tasks = tasks
        self.tools = tools
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        self.reward_fn = reward_fn
        self.max_turns = max_turns
        self.answer_tag = answer_tag
        self.demonstrations = [list(demo) for demo in demonstrations]
        self.instructions = system_prompt
        """The system prompt without the tools' description."""
        tools_prompt = self.parser.format_tools_prompt(tools.schemas()) if len(tools) else ""
        self.system_prompt = "\n\n".join(part for part in (system_prompt, tools_prompt) if part)
        self.task: Task | None = None
        self.turn = 0

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def opening_messages(self, task: Task, *, describe_tools: bool = True) -> list[Message]:
        """The reset's messages; ``describe_tools=False`` leaves the tools' description out
        of the system message (a chat template describes them)."""
        system = self.system_prompt if describe_tools else self.instructions
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        for demo in self.demonstrations:
            messages.extend(demo)
        messages.append({"role": "user", "content": task.prompt})
        return messages

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode on ``options["task_index"]`` (or ``options["task"]``), else on a
        task drawn with ``seed``. ``options["tools_prompt"] = "template"``: leave the tools'
        description to the chat template where the format allows (see the class docstring)."""
        options = options or {}
        if "task" in options:
            self.task = options["task"]
        elif "task_index" in options:
            self.task = self.tasks[options["task_index"]]
        else:
            self.task = self.tasks[random.Random(seed).randrange(len(self.tasks))]
        self.turn = 0
        info: dict[str, Any] = {"task_id": self.task.id}
        in_template = False
        if len(self.tools):
            in_template = options.get("tools_prompt") == "template" and self.parser.template_tools
            info["tools"] = self.tools.schemas()
            info["tools_prompt"] = "template" if in_template else "text"
        return self.opening_messages(self.task, describe_tools=not in_template), info

    def close(self) -> None:
        """Release per-episode tool resources (e.g. python sessions); safe to call twice."""
        for item in self.tools:
            close = getattr(item, "close", None)
            if callable(close):
                close()

    def _run_tools(self, calls) -> list[ToolResult]:
        if len(calls) <= 1:
            return [self.tools.invoke(call) for call in calls]
        with ThreadPoolExecutor(max_workers=min(8, len(calls))) as pool:
            return list(pool.map(self.tools.invoke, calls))

    def score_answer(self, answer: str | None) -> tuple[float, bool, dict[str, Any]]:
        """(reward, correct, extra info) of the final answer; subclasses with richer
        scoring (EM/F1, format terms) override this instead of ``step``."""
        reward = float(self.reward_fn(answer, self.task))
        return reward, reward > 0, {}

    def record_calls(self, calls, call_results: list[ToolResult], results: list[ToolResult]) -> None:
        """Hook to keep per-episode statistics of a tool turn: ``calls`` pair with
        ``call_results``; ``results`` also holds the unparseable calls. Default: nothing."""

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("step() called before reset()")
        self.turn += 1
        text = assistant_message.get("content") or ""
        answer = extract_tag(text, self.answer_tag)
        parsed = self.parser.parse(text) if len(self.tools) else None
        if answer is not None or parsed is None or not parsed.has_calls:
            # An answer ends the episode even if the same turn also calls a tool: the
            # reward only ever depends on the answer the model committed to.
            reward, correct, extra = self.score_answer(answer)
            return [], reward, True, False, {"answer": answer, "correct": correct, "tool_results": [], **extra}
        return self.tool_turn(parsed)

    def tool_turn(self, parsed) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """The step of a turn that called tools: run them (malformed calls answered with
        their error), record them, and show the results; truncated at ``max_turns``."""
        results = [ToolResult(name=INVALID_CALL, content=f"Error: {error}", ok=False, malformed=True) for error in parsed.errors]
        call_results = self._run_tools(parsed.calls)
        results += call_results
        self.record_calls(parsed.calls, call_results, results)
        observations = [self.parser.format_result(result) for result in results]
        truncated = self.turn >= self.max_turns
        return observations, 0.0, False, truncated, {"answer": None, "correct": False, "tool_results": results}

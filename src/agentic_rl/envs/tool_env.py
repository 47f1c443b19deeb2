"""``ToolEnv``: a task, a set of tools, a call format, a reward and a turn limit; optionally
memory tools (``memory``), reflection: more attempts after a wrong answer (``attempts``),
and a plan-first format (``plan_first``)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentic_rl.envs.base import Task
from agentic_rl.envs.planning import PLAN_ACK, PLAN_INSTRUCTION, PLAN_TAG, plan_adherence, plan_steps, planned_calls
from agentic_rl.envs.terms import RewardTerm
from agentic_rl.parsers import ToolCallParser, get_parser
from agentic_rl.rewards import extract_tag, numeric_match
from agentic_rl.rewards.signature import check_reward_order
from agentic_rl.tools import ToolRegistry
from agentic_rl.tools.memory import MemoryTools, memory_tools
from agentic_rl.types import INVALID_CALL, Message, ToolCall, ToolResult

RewardFn = Callable[[str | None, Task], float]


def numeric_reward(answer: str | None, task: Task) -> float:
    return 1.0 if numeric_match(answer, task.answer) else 0.0


MAX_QUOTED_ANSWER_CHARS = 100
"""Feedback quotes a wrong answer up to this long (on one line); a longer one is not quoted."""


def check_reflection_options(attempts: Any, attempt_discount: Any, self_critique: Any) -> None:
    """ValueError naming the first bad reflection option."""
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        raise ValueError(f"attempts: expected a positive int, got {attempts!r}")
    if (
        not isinstance(attempt_discount, (int, float))
        or isinstance(attempt_discount, bool)
        or not 0.0 < attempt_discount <= 1.0
    ):
        raise ValueError(f"attempt_discount: expected a number in (0, 1], got {attempt_discount!r}")
    if not isinstance(self_critique, bool):
        raise ValueError(f"self_critique: expected true or false, got {self_critique!r}")


def check_plan_options(plan_first: Any) -> None:
    """ValueError naming a bad planning option."""
    if not isinstance(plan_first, bool):
        raise ValueError(f"plan_first: expected true or false, got {plan_first!r}")


PLAN_TERM = RewardTerm("episode", "1 when the first turn held a plan (with plan_first), paid with the final answer")


class ToolEnv:
    """A multi-turn tool-use episode over a sequence of tasks.

    Each assistant turn either calls tools (the results come back as ``tool`` messages
    and the episode goes on) or answers inside ``<answer_tag>`` (the episode terminates
    and the reward is scored). A reply with neither also ends the episode, scored as a
    missing answer. Reaching ``max_turns`` truncates.

    Reflection: with ``attempts`` > 1, a final reply that is not correct (a wrong or a
    missing answer) does not end the episode while attempts and turns remain: the step
    returns reward 0 and a user message saying the answer is incorrect (never the gold
    answer; with ``self_critique``, asking for a short critique first), and the agent tries
    again. The episode's reward is the last attempt's, times ``attempt_discount`` to the
    power (attempts used - 1); ``correct`` is the last attempt's. ``attempts=1`` is the
    plain episode.

    Memory: ``memory`` (``"episode"``, ``"shared"``, a mapping, or a
    :class:`~agentic_rl.tools.memory.MemoryTools`) adds ``memory_write``, ``memory_read`` and
    ``memory_search`` to the tools. :meth:`episode_metrics` reports ``reflection/*`` (with
    attempts > 1) and ``memory/*`` (with memory) counters.

    Planning: with ``plan_first`` the system prompt asks for a plan first; a first turn with
    ``<plan>...</plan>`` and no call or answer is acknowledged (a user message) and the
    episode goes on (with calls or an answer, the turn is handled as usual, the plan kept).
    The ``plan`` episode term (``reward.terms.plan`` weighs it) is 1 when the first turn held a
    plan, reported with the final answer. Metrics: ``plan/made``, ``plan/steps`` and
    ``plan/adherence`` (:mod:`agentic_rl.envs.planning`; only when the plan names a tool).

    The tools are described in the system message in the parser's format. A renderer
    whose chat template describes tools itself resets with ``options["tools_prompt"] =
    "template"``: where the parser's format fits a template's description
    (``parser.template_tools``) the system message then leaves them out. The reset info
    says which was done: ``info["tools"]`` (the tools' schemas) and
    ``info["tools_prompt"]`` ("text" or "template"). Such a template (Qwen's, Hermes') may
    also frame tool messages itself (``<tool_response>``): where it frames them as the
    parser would, results (the demonstrations' too) are bare and ``info`` holds
    ``tool_output_template``, so the model never sees a double frame.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        tools: ToolRegistry | Sequence[Any],
        *,
        parser: ToolCallParser | str = "hermes",
        reward_fn: RewardFn = numeric_reward,
        max_turns: int = 4,
        system_prompt: str = "",
        demonstrations: Sequence[Sequence[Message]] = (),
        answer_tag: str = "answer",
        attempts: int = 1,
        attempt_discount: float = 1.0,
        self_critique: bool = False,
        memory: MemoryTools | str | dict | bool | None = None,
        plan_first: bool = False,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns: expected a positive int, got {max_turns}")
        check_reflection_options(attempts, attempt_discount, self_critique)
        check_plan_options(plan_first)
        self.plan_first = plan_first
        self.reward_terms: dict[str, RewardTerm] = {"plan": PLAN_TERM} if plan_first else {}
        """The named reward terms this env reports (``envs.terms``); subclasses add theirs."""
        self.plan: str | None = None
        """The first turn's plan (plan_first), None when it gave none."""
        self.made_calls: Counter = Counter()
        """Tool calls made this episode, by tool name."""
        if plan_first:
            system_prompt = "\n\n".join(part for part in (system_prompt, PLAN_INSTRUCTION) if part)
        self.tasks = tasks
        tools = (
            tools if isinstance(tools, ToolRegistry) else ToolRegistry(list(tools))
        )  # a plain list of @tool functions
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        self.memory = memory_tools(memory)
        self.framed = False
        """This episode's tool output is framed by the chat template, not by the parser
        (reset ``options["tool_output_template"]``, ``ToolCallParser.framed_by``)."""
        if self.memory is not None:
            self._check_parser_calls_memory()
            tools = ToolRegistry([*tools, *self.memory.tools])
        self.tools = tools
        self.parser.bind_tools(tools.schemas())
        self.attempts = attempts
        self.attempt_discount = float(attempt_discount)
        self.self_critique = self_critique
        self.attempt_results: list[bool] = []
        """Whether each answer given in this episode was correct, in order."""
        check_reward_order(reward_fn, "reward_fn")
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

    def _check_parser_calls_memory(self) -> None:
        """Tag formats that call one fixed tool (``search_r1``, ``retool``) cannot call the
        memory tools: refuse the combination instead of offering tools the model cannot use."""
        call = ToolCall(name="memory_read", arguments={"key": "k"}, id="call_0")
        try:
            parsed = self.parser.parse(self.parser.format_call(call)).calls
        except Exception:
            parsed = []
        if not parsed or parsed[0].name != call.name or parsed[0].arguments != call.arguments:
            raise ValueError(
                f"memory: the {self.parser.name or type(self.parser).__name__} call format cannot call the memory tools; use parser hermes"
            )

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def opening_messages(self, task: Task, *, describe_tools: bool = True) -> list[Message]:
        """The reset's messages; ``describe_tools=False`` leaves the tools' description out
        of the system message (a chat template describes them)."""
        system = self.system_prompt if describe_tools else self.instructions
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        for demo in self.demonstrations:
            if self.framed:  # the chat template frames tool output: the demonstrations' results go bare too
                demo = [
                    {**m, "content": self.parser.unwrap_observation(m.get("content") or "")}
                    if m.get("role") == "tool"
                    else m
                    for m in demo
                ]
            messages.extend(demo)
        messages.append({"role": "user", "content": task.prompt})
        return messages

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode on ``options["task_index"]`` (or ``options["task"]``), else on a
        task drawn with ``seed``. ``options["tools_prompt"] = "template"``: leave the tools'
        description to the chat template where the format allows (see the class docstring);
        ``options["tool_output_template"]`` (with it): how the template renders a tool
        message; where it frames output as the parser does, results go bare."""
        options = options or {}
        if "task" in options:
            self.task = options["task"]
        elif "task_index" in options:
            self.task = self.tasks[options["task_index"]]
        else:
            self.task = self.tasks[random.Random(seed).randrange(len(self.tasks))]
        self.turn = 0
        self.attempt_results = []
        self.plan, self.made_calls = None, Counter()
        if self.memory is not None:
            self.memory.reset()
        info: dict[str, Any] = {"task_id": self.task.id}
        in_template = False
        self.framed = False
        if len(self.tools):
            in_template = options.get("tools_prompt") == "template" and self.parser.template_tools
            info["tools"] = self.tools.schemas()
            info["tools_prompt"] = "template" if in_template else "text"
            self.framed = in_template and self.parser.framed_by(options.get("tool_output_template"))
            if self.framed:  # a replay (ARPO) resets with the same options
                info["tool_output_template"] = options["tool_output_template"]
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

    def process_reward(self, calls, call_results: list[ToolResult]) -> float:
        """Hook: the process reward of the tool turn just recorded (``info["turn_reward"]``,
        read by turn-level credit assignment), called after :meth:`record_calls`. Default: 0."""
        return 0.0

    def turn_terms(self, calls, call_results: list[ToolResult]) -> dict[str, float]:
        """Hook: the named terms of the tool turn just recorded (``info["turn_terms"]``),
        called after :meth:`record_calls`. Default: none."""
        return {}

    def episode_terms(self, answer: str | None) -> dict[str, float]:
        """The named episode terms reported with the final reply (``info["reward_terms"]``):
        ``plan`` with plan_first; subclasses add theirs."""
        return {"plan": float(self.plan is not None)} if self.plan_first else {}

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("step() called before reset()")
        self.turn += 1
        text = assistant_message.get("content") or ""
        answer = extract_tag(text, self.answer_tag)
        parsed = self.parser.parse(text) if len(self.tools) else None
        if self.plan_first and self.turn == 1:
            self.plan = extract_tag(text, PLAN_TAG)
            if self.plan is not None and answer is None and (parsed is None or not parsed.has_calls):
                return (
                    [{"role": "user", "content": PLAN_ACK}],
                    0.0,
                    False,
                    self.turn >= self.max_turns,
                    {"answer": None, "correct": False, "tool_results": []},
                )
        if answer is not None or parsed is None or not parsed.has_calls:
            # An answer ends the attempt even if the same turn also calls a tool: the
            # reward only ever depends on the answer the model committed to.
            return self.answer_turn(answer)
        return self.tool_turn(parsed)

    def answer_turn(self, answer: str | None) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """The step of a final reply: scored, and the end of the episode, unless it is not
        correct and attempts and turns remain (then reward 0 and a feedback message)."""
        reward, correct, extra = self.score_answer(answer)
        self.attempt_results.append(correct)
        attempt = len(self.attempt_results)
        info = {"answer": answer, "correct": correct, "tool_results": [], **extra}
        if not correct and attempt < self.attempts and self.turn < self.max_turns:
            return [self.feedback_message(answer)], 0.0, False, False, info
        if attempt > 1:
            reward *= self.attempt_discount ** (attempt - 1)
        terms = self.episode_terms(answer)
        if terms:
            info["reward_terms"] = terms
        return [], reward, True, False, info

    def feedback_message(self, answer: str | None) -> Message:
        """The user message after an incorrect attempt: the verdict, then the request to
        try again (with ``self_critique``, after a short critique)."""
        ask = (
            " First write a short critique of what went wrong, then try again." if self.self_critique else " Try again."
        )
        return {"role": "user", "content": self.verdict(answer) + ask}

    def verdict(self, answer: str | None) -> str:
        """What the feedback says of an incorrect answer: it quotes the model's own answer
        (when short) and nothing of the task's gold answer. Envs with other answers override it."""
        if answer is None or not answer.strip():
            return f"You did not give a final answer inside <{self.answer_tag}></{self.answer_tag}>."
        shown = answer.strip()
        quotable = len(shown) <= MAX_QUOTED_ANSWER_CHARS and "\n" not in shown
        return f"Your answer {shown} is incorrect." if quotable else "Your answer is incorrect."

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """``reflection/attempts_used`` (answers given), ``reflection/correct_at_1`` (the first
        answer was correct) and ``reflection/correct_at_final`` (the last one was) when
        attempts > 1; the memory tools' ``memory/*`` counters when memory is on."""
        metrics: dict[str, float] = {}
        if self.attempts > 1:
            results = self.attempt_results
            metrics["reflection/attempts_used"] = float(len(results))
            metrics["reflection/correct_at_1"] = float(bool(results) and results[0])
            metrics["reflection/correct_at_final"] = float(bool(results) and results[-1])
        if self.memory is not None:
            metrics.update(self.memory.metrics())
        if self.plan_first:
            metrics["plan/made"] = float(self.plan is not None)
            metrics["plan/steps"] = float(len(plan_steps(self.plan or "")))
            adherence = plan_adherence(planned_calls(self.plan or "", self.tools.names()), self.made_calls)
            if adherence is not None:
                metrics["plan/adherence"] = adherence
        return metrics

    def tool_turn(self, parsed) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """The step of a turn that called tools: run them (malformed calls answered with
        their error), record them, and show the results; truncated at ``max_turns``."""
        results = [
            ToolResult(name=INVALID_CALL, content=f"Error: {error}", ok=False, malformed=True)
            for error in parsed.errors
        ]
        call_results = self._run_tools(parsed.calls)
        self.made_calls.update(call.name for call in parsed.calls)
        results += call_results
        self.record_calls(parsed.calls, call_results, results)
        info = {"answer": None, "correct": False, "tool_results": results}
        turn_reward = self.process_reward(parsed.calls, call_results)
        if turn_reward:
            info["turn_reward"] = turn_reward
        terms = self.turn_terms(parsed.calls, call_results)
        if terms:
            info["turn_terms"] = terms
        observations = [self.parser.format_result(result, framed=self.framed) for result in results]
        truncated = self.turn >= self.max_turns
        return observations, 0.0, False, truncated, info

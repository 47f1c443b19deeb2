"""``arithmetic``: procedurally generated multi-operand problems solved with the calculator.

Problems are generated from a per-task seed that includes the split name, so the train
and test splits (and the few-shot demonstrations, split ``demo``) never share a seed and
evaluation never sees a training task. With the default knobs (3-digit operands, three
operands, ``+ - *``) a 135M model cannot do them reliably in its head, so the reward
measures tool use.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

from agentic_rl.envs.base import GeneratedTasks, Task
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, get_parser
from agentic_rl.tools import ToolRegistry, get_tool
from agentic_rl.tools.calculator import calculator
from agentic_rl.types import Message, ToolCall

SPLITS = ("train", "test", "demo")
DEFAULT_NUM_TASKS = {"train": 10_000, "test": 1_000, "demo": 16}
DEFAULT_SYSTEM_PROMPT = (
    "You solve arithmetic problems. Use the calculator tool for the computation, "
    "then give the final answer as <answer>NUMBER</answer>."
)
DEFAULT_SYSTEM_PROMPT_NO_TOOLS = "You solve arithmetic problems. Give the final answer as <answer>NUMBER</answer>."
PHRASINGS = ("symbols", "words")

# ``words`` phrasing: one instruction per operation on a running value. The expression the
# model must write is not a copy of the prompt: every step after the first wraps what came
# before in parentheses, and half the subtraction steps ("subtract it from N", "take it
# away from N") reverse the operand order.
_STEPS = {
    "+": ("add {n}", "increase it by {n}"),
    "-": ("subtract {n}", "decrease it by {n}", "subtract it from {n}", "take it away from {n}"),
    "*": ("multiply it by {n}", "multiply the result by {n}"),
}
DEFAULT_REVERSED_STEPS = 0.5
"""The share of subtraction steps phrased in reverse order: half of ``_STEPS["-"]``."""


class ArithmeticTasks(GeneratedTasks):
    """A lazy, seeded sequence of arithmetic tasks (task i is the same on every machine)."""

    def __init__(
        self,
        *,
        split: str = "train",
        seed: int = 0,
        num_tasks: int | None = None,
        digits: int = 3,
        num_operands: int = 3,
        operators: str = "+-*",
        phrasing: str = "symbols",
        reversed_steps: float = DEFAULT_REVERSED_STEPS,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        if not 1 <= digits <= 12:
            raise ValueError(f"digits: expected an int in [1, 12], got {digits}")
        if not 2 <= num_operands <= 8:
            raise ValueError(f"num_operands: expected an int in [2, 8], got {num_operands}")
        if not operators or any(op not in "+-*" for op in operators):
            raise ValueError(f"operators: expected a non-empty string of '+', '-', '*', got {operators!r}")
        if phrasing not in PHRASINGS:
            raise ValueError(f"phrasing: expected one of {', '.join(PHRASINGS)}, got {phrasing!r}")
        if not 0.0 <= reversed_steps <= 1.0:
            raise ValueError(f"reversed_steps: expected a fraction in [0, 1], got {reversed_steps}")
        if reversed_steps != DEFAULT_REVERSED_STEPS and (phrasing != "words" or "-" not in operators):
            raise ValueError("reversed_steps: applies to phrasing words with '-' in operators")
        self.split, self.seed, self.digits, self.num_operands, self.phrasing = (
            split,
            seed,
            digits,
            num_operands,
            phrasing,
        )
        self.reversed_steps = reversed_steps
        self.operators = sorted(set(operators))
        self.size = DEFAULT_NUM_TASKS[split] if num_tasks is None else num_tasks
        if self.size < 1:
            raise ValueError(f"num_tasks: expected a positive int, got {num_tasks}")

    def generate(self, index: int) -> Task:
        # The words phrasing draws from its own seed stream so that symbols tasks keep
        # the ids and contents they always had.
        tag = "arithmetic" if self.phrasing == "symbols" else f"arithmetic-{self.phrasing}"
        rng = random.Random(f"{tag}:{self.split}:{self.seed}:{index}")
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        if self.phrasing == "words":
            prompt, expression = _word_problem(rng, low, high, self.num_operands, self.operators, self.reversed_steps)
        else:
            parts = [str(rng.randint(low, high))]
            for _ in range(self.num_operands - 1):
                parts += [rng.choice(self.operators), str(rng.randint(low, high))]
            expression = " ".join(parts)
            prompt = f"What is {expression}?"
        suffix = "" if self.phrasing == "symbols" else f"-{self.phrasing}"
        return Task(
            id=f"arithmetic{suffix}-{self.split}-{self.seed}-{index}",
            prompt=prompt,
            answer=calculator(expression),
            metadata={"expression": expression},
        )


def _word_problem(
    rng: random.Random, low: int, high: int, num_operands: int, operators: Sequence[str], reversed_steps: float
) -> tuple[str, str]:
    """A step-by-step word problem and the one expression that computes it; a subtraction
    step is phrased in reverse order ("subtract it from N") with probability ``reversed_steps``."""
    start = rng.randint(low, high)
    expression, steps = str(start), []
    for _ in range(num_operands - 1):
        op, n = rng.choice(operators), rng.randint(low, high)
        if op == "-" and reversed_steps != DEFAULT_REVERSED_STEPS:
            forward, backward = _STEPS["-"][:2], _STEPS["-"][2:]
            template = rng.choice(backward if rng.random() < reversed_steps else forward)
        else:  # one uniform draw over the templates: the tasks every seed always had
            template = rng.choice(_STEPS[op])
        left = f"({expression})" if " " in expression else expression
        expression = f"{n} - {left}" if template.endswith("from {n}") else f"{left} {op} {n}"
        steps.append(template.format(n=n))
    body = ", then ".join(steps)
    return f"Start with {start}, {body}. What is the result?", expression


def demonstration(task: Task, style: Literal["tool", "answer"], parser) -> list[Message]:
    """A solved example as earlier conversation turns: a calculator call and its result,
    then the answer ("tool"), or the answer alone ("answer")."""
    if style == "answer":
        return [
            {"role": "user", "content": task.prompt},
            {"role": "assistant", "content": f"<answer>{task.answer}</answer>"},
        ]
    call = ToolCall(name="calculator", arguments={"expression": task.metadata["expression"]}, id="call_0")
    result = calculator.invoke(call)
    return [
        {"role": "user", "content": task.prompt},
        {"role": "assistant", "content": parser.format_call(call)},
        parser.format_result(result),
        {"role": "assistant", "content": f"<answer>{result.content}</answer>"},
    ]


class ArithmeticEnv(ToolEnv):
    """The arithmetic ToolEnv with a scripted expert for cold-start data."""

    def expert_reply(self) -> str:
        """One calculator call with the task's expression, then the answer it returned
        (the answer alone when the calculator is not offered) — ``sft.collect.source: expert``."""
        if self.task is None:
            raise RuntimeError("expert_reply() called before reset()")
        if self.turn == 0 and "calculator" in self.tools:
            call = ToolCall(name="calculator", arguments={"expression": self.task.metadata["expression"]}, id="call_0")
            return self.parser.format_call(call)
        return f"<{self.answer_tag}>{self.task.answer}</{self.answer_tag}>"


def make_arithmetic_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    digits: int = 3,
    num_operands: int = 3,
    operators: str = "+-*",
    phrasing: str = "symbols",
    reversed_steps: float = DEFAULT_REVERSED_STEPS,
    tools: Sequence[str] = ("calculator",),
    few_shot: int = 0,
    demo_style: Literal["tool", "answer"] | None = None,
    system_prompt: str | None = None,
    max_turns: int = 4,
    parser: str = "hermes",
    max_calls_per_turn: int = 4,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
    memory: str | dict | bool | None = None,
    plan_first: bool = False,
) -> ArithmeticEnv:
    """Build the arithmetic env.

    Args:
        digits: How many digits each operand has, from 1 to 12; every operand is drawn
            uniformly from the numbers with exactly that many digits.
        num_operands: How many numbers each problem combines, from 2 to 8.
        operators: The operations to draw from, a non-empty string of ``+``, ``-`` and ``*``
            (e.g. ``"+-"``); each operation is drawn uniformly from the distinct ones given.
        phrasing: ``symbols`` asks "What is 347 * 28 - 900?". ``words`` states the problem as
            steps on a running value ("Start with 347, multiply it by 28, then subtract it from
            900"), so the model has to turn words into one parenthesized expression rather than
            copy it; its tasks come from their own seed stream and have their own ids.
        reversed_steps: With ``phrasing="words"``, the share of subtraction steps phrased in
            reverse operand order ("subtract it from N"), from 0 to 1: 1.0 for RL on the hard
            case only, 0.0 for forward steps only; the default half keeps the tasks each seed
            always had. Any other value needs ``phrasing="words"`` and ``-`` in ``operators``.
        tools: The tools offered: ``["calculator"]``, or ``[]`` to remove the calculator (to
            measure what the model does in its head); without it the default system prompt
            drops the calculator instruction.
        few_shot: How many solved demonstrations precede the question, from 0 to 16; they come
            from the ``demo`` split (same knobs), so they never repeat a train or test task.
        demo_style: How the demonstrations are solved: ``tool`` (a calculator call, its result,
            then the answer; needs the calculator in ``tools``) or ``answer`` (the answer
            alone). Unset: ``tool`` when a tool is offered, else ``answer``.
    """
    if few_shot < 0 or few_shot > DEFAULT_NUM_TASKS["demo"]:
        raise ValueError(f"few_shot: expected an int in [0, {DEFAULT_NUM_TASKS['demo']}], got {few_shot}")
    knobs = dict(
        seed=seed,
        digits=digits,
        num_operands=num_operands,
        operators=operators,
        phrasing=phrasing,
        reversed_steps=reversed_steps,
    )
    registry = ToolRegistry(get_tool(name) for name in tools)
    call_parser = get_parser(parser, max_calls_per_turn=max_calls_per_turn, max_argument_chars=max_argument_chars)
    style = demo_style or ("tool" if len(registry) else "answer")
    if style == "tool" and "calculator" not in registry:
        raise ValueError("demo_style: 'tool' demonstrations need the calculator in tools")
    demos = [demonstration(task, style, call_parser) for task in ArithmeticTasks(split="demo", **knobs)[:few_shot]]
    if system_prompt is None:
        system_prompt = DEFAULT_SYSTEM_PROMPT if len(registry) else DEFAULT_SYSTEM_PROMPT_NO_TOOLS
    return ArithmeticEnv(
        ArithmeticTasks(split=split, num_tasks=num_tasks, **knobs),
        registry,
        parser=call_parser,
        max_turns=max_turns,
        system_prompt=system_prompt,
        demonstrations=demos,
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
        plan_first=plan_first,
    )

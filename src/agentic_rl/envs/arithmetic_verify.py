"""``arithmetic-verify``: a solver and a verifier on one word problem (an env with roles).

The solver plays the ``arithmetic`` env's ``words`` problem (calculator calls, then
``<answer>N</answer>``). The verifier then gets, in a conversation of its own, the problem
and a proposed answer, checks it (the calculator is offered to it too) and replies
``<answer>correct</answer>`` or ``<answer>wrong</answer>``. The proposed answer is the
solver's, except that with probability ``corrupt`` (drawn from the task, so the same on
every run) a right answer is shown off by a small amount: the verifier sees wrong answers
even from a solver that is always right (the cold start's expert is). Rewards, each role
its own: the solver 1 for the task's answer, the verifier 1 for the right verdict on what
it was shown.
"""

from __future__ import annotations

import random
from typing import Any

from agentic_rl.envs.arithmetic import ArithmeticEnv, ArithmeticTasks, make_arithmetic_env
from agentic_rl.envs.base import OPENING_INFO
from agentic_rl.envs.tool_env import numeric_reward
from agentic_rl.parsers import get_parser
from agentic_rl.tools import ToolRegistry, get_tool
from agentic_rl.types import Message, Task

ROLES = ("solver", "verifier")
VERDICTS = ("correct", "wrong")
SOLVER_PROMPT = (
    "You are the solver. Use the calculator tool for the computation, then give the final answer as "
    "<answer>NUMBER</answer>."
)
VERIFIER_PROMPT = (
    "You are the verifier. Check the proposed answer to the problem with the calculator tool, then reply "
    "<answer>correct</answer> if it is right or <answer>wrong</answer> if it is not."
)


def verdict_reward(answer: str | None, task: Task) -> float:
    """1.0 when the verifier's verdict (``correct`` or ``wrong``, any case) is the task's."""
    return float((answer or "").strip().lower() == task.answer)


class ArithmeticVerifyEnv:
    """The solver/verifier env: ``roles`` ("solver", "verifier"); each role's conversation
    is an arithmetic ToolEnv (the verifier's scores verdicts)."""

    roles = ROLES

    def __init__(self, tasks: ArithmeticTasks, solver: ArithmeticEnv, verifier: ArithmeticEnv, *, corrupt: float):
        if not 0.0 <= corrupt <= 1.0:
            raise ValueError(f"corrupt: expected a probability in [0, 1], got {corrupt}")
        self.tasks, self.solver, self.verifier, self.corrupt = tasks, solver, verifier, corrupt
        self.task: Task | None = None
        self.options: dict[str, Any] = {}
        self.shown: str | None = None
        """The answer shown to the verifier (None while the solver plays)."""
        self.solved = self.judged = 0.0

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict]:
        """The solver's opening on ``options["task_index"]`` (else a task drawn with
        ``seed``); the other options go to both roles' resets."""
        options = dict(options or {})
        index = options.pop("task_index", None)
        options.pop("task", None)
        self.task = self.tasks[random.Random(seed).randrange(len(self.tasks)) if index is None else index]
        self.options, self.shown, self.solved, self.judged = options, None, 0.0, 0.0
        messages, info = self.solver.reset(options={**options, "task": self.task})
        return messages, {**info, "role": "solver"}

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("step() called before reset()")
        if self.shown is None:
            observations, reward, terminated, truncated, info = self.solver.step(assistant_message)
            if not (terminated or truncated):
                return observations, reward, False, False, {**info, "role": "solver"}
            return self._to_verifier(info.get("answer"), reward)
        observations, reward, terminated, truncated, info = self.verifier.step(assistant_message)
        info = {**info, "role": "verifier", "role_rewards": {"solver": 0.0}}
        if terminated or truncated:
            self.judged = reward
        return observations, reward, terminated, truncated, info

    def _to_verifier(self, answer: str | None, solved: float) -> tuple[list[Message], float, bool, bool, dict]:
        """The solver is done: the verifier's conversation opens on the (maybe corrupted) answer."""
        self.solved = solved
        shown = (answer or "").strip() or "(no answer)"
        draw = random.Random(f"corrupt:{self.task.id}")
        if solved > 0 and draw.random() < self.corrupt:
            shown = str(int(self.task.answer) + draw.choice((-10, -2, -1, 1, 2, 10)))
        self.shown = shown
        truth = "correct" if numeric_reward(shown, self.task) > 0 else "wrong"
        prompt = f"Problem: {self.task.prompt}\nProposed answer: {shown}\nIs the proposed answer correct?"
        judging = Task(id=f"{self.task.id}-verify", prompt=prompt, answer=truth, metadata=self.task.metadata)
        messages, opening = self.verifier.reset(options={**self.options, "task": judging})
        info = {"role": "verifier", "role_rewards": {"solver": solved, "verifier": 0.0}, "solver_answer": answer}
        return messages, 0.0, False, False, {**info, **{k: opening[k] for k in OPENING_INFO if k in opening}}

    def expert_reply(self) -> str:
        """The role whose turn it is, played right: the solver's calculator call and answer,
        the verifier's calculator check and verdict (``sft.collect.source: expert``)."""
        if self.task is None:
            raise RuntimeError("expert_reply() called before reset()")
        return (self.solver if self.shown is None else self.verifier).expert_reply()

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """``solver_correct``, ``verdict_correct`` (0 until the verifier answered),
        ``shown_wrong`` (the verifier was shown a wrong answer), and the verdict's accuracy
        apart on wrong and on right answers shown (``verdict_on_wrong``: wrong answers caught;
        ``verdict_on_right``: right ones accepted; each averaged over its own episodes, so a
        verifier that always says wrong scores 1 and 0)."""
        if self.shown is None:
            return {"solver_correct": self.solved, "verdict_correct": 0.0}
        wrong = numeric_reward(self.shown, self.task) == 0
        return {
            "solver_correct": self.solved,
            "verdict_correct": self.judged,
            "shown_wrong": float(wrong),
            "verdict_on_wrong" if wrong else "verdict_on_right": self.judged,
        }

    def close(self) -> None:
        self.solver.close()
        self.verifier.close()


def make_arithmetic_verify_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    digits: int = 3,
    num_operands: int = 3,
    operators: str = "+-*",
    corrupt: float = 0.5,
    solver_prompt: str = SOLVER_PROMPT,
    verifier_prompt: str = VERIFIER_PROMPT,
    max_turns: int = 3,
    parser: str = "hermes",
) -> ArithmeticVerifyEnv:
    """Build the solver/verifier env.

    Args:
        split: ``train`` or ``test`` tasks (the arithmetic env's ``words`` phrasing, its seed streams).
        digits: How many digits each operand has, from 1 to 12.
        num_operands: How many numbers each problem combines, from 2 to 8.
        operators: The operations to draw from, a non-empty string of ``+``, ``-`` and ``*``.
        corrupt: The probability that a right answer of the solver is shown to the verifier
            off by a small amount (drawn per task), from 0 to 1.
        solver_prompt: The solver's system prompt.
        verifier_prompt: The verifier's system prompt.
        max_turns: Each role's turn limit (calculator calls and the answer or verdict).
        parser: The tool-call format of both roles (``hermes``, ``llama3_json``, ...).
    """
    knobs = dict(seed=seed, digits=digits, num_operands=num_operands, operators=operators)
    tasks = ArithmeticTasks(split=split, num_tasks=num_tasks, phrasing="words", **knobs)
    solver = make_arithmetic_env(split=split, system_prompt=solver_prompt, max_turns=max_turns, parser=parser, **knobs)
    verifier = ArithmeticEnv(
        tasks,
        ToolRegistry([get_tool("calculator")]),
        parser=get_parser(parser),
        reward_fn=verdict_reward,
        max_turns=max_turns,
        system_prompt=verifier_prompt,
    )
    return ArithmeticVerifyEnv(tasks, solver, verifier, corrupt=corrupt)

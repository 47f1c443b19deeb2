"""``arithmetic-verify``: a solver and a verifier on one word problem (an env with roles).

The solver plays the ``arithmetic`` env's ``words`` problem (calculator calls, then
``<answer>N</answer>``). The verifier then gets, in a conversation of its own, the problem
and a proposed answer, checks it (the calculator is offered to it too) and replies
``<answer>correct</answer>`` or ``<answer>wrong</answer>``. Rewards, each role its own:
the solver 1 for the task's answer, the verifier 1 for the right verdict on what it was
shown. What the verifier is shown (``shown``):

- ``balanced`` (default): a right answer on half of the tasks, a wrong one on the others
  (drawn from the task, the same on every run): the solver's answer when it is wrong, else
  the right one off by a little; the task's answer when the solver's is wrong on a "right"
  task. A verifier that always says the same verdict scores 0.5, whatever the solver's
  accuracy (with the solver's own answers a weak solver makes "wrong" right 3 times in 4).
- ``solver``: the solver's own answer, always (a verifier judging real outputs).
"""

from __future__ import annotations

import random
from typing import Any, Literal

from agentic_rl.envs.arithmetic import ArithmeticEnv, ArithmeticTasks, make_arithmetic_env
from agentic_rl.envs.base import OPENING_INFO
from agentic_rl.envs.tool_env import numeric_reward
from agentic_rl.parsers import get_parser
from agentic_rl.tools import ToolRegistry, get_tool
from agentic_rl.types import Message, Task

ROLES = ("solver", "verifier")
SHOWN = ("balanced", "solver")
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

    def __init__(self, tasks: ArithmeticTasks, solver: ArithmeticEnv, verifier: ArithmeticEnv, *, shown: str):
        if shown not in SHOWN:
            raise ValueError(f"shown: expected one of {', '.join(SHOWN)}, got {shown!r}")
        self.tasks, self.solver, self.verifier, self.mode = tasks, solver, verifier, shown
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
        """The solver is done: the verifier's conversation opens on the answer ``shown`` says."""
        self.solved = solved
        shown = (answer or "").strip() or "(no answer)"
        draw = random.Random(f"shown:{self.task.id}")
        if self.mode == "balanced":
            if draw.random() < 0.5:
                shown = self.task.answer
            elif solved > 0:
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
    shown: Literal["balanced", "solver"] = "balanced",
    solver_prompt: str = SOLVER_PROMPT,
    verifier_prompt: str = VERIFIER_PROMPT,
    max_turns: int = 3,
    parser: str = "hermes",
) -> ArithmeticVerifyEnv:
    """Build the solver/verifier env.

    Args:
        split: ``train`` or ``test`` tasks (the arithmetic env's ``words`` phrasing, its seed streams).
        shown: What the verifier judges: ``balanced`` (a right answer on half of the tasks, a
            wrong one on the others, whatever the solver did) or ``solver`` (the solver's own).
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
    return ArithmeticVerifyEnv(tasks, solver, verifier, shown=shown)


make_arithmetic_verify_env.options_from = (
    make_arithmetic_env  # envs/option_docs.py reads its Args (digits, operators...)
)

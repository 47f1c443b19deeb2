"""``arithmetic-team``: a planner and a solver on one word problem (an env with roles).

The planner reads a step-by-step word problem (the arithmetic env's ``words`` phrasing:
"Start with 541, take it away from 820, then multiply it by 103") and replies with one
expression; the solver gets that expression as its own conversation, computes it with the
calculator and answers. Each role sees only its own conversation; the episode is the
team's. Credit (``credit``):

- ``role`` (default): each role is judged on its own job: the planner on whether its
  expression's value is the task's answer (given when it replies), the solver on whether it
  answered the value of the expression it was given.
- ``shared``: both roles get the team's outcome, whether the solver's answer is the task's.

A reply of the planner that is not an expression (numbers, ``+ - *`` and parentheses on its
first line) ends the episode there, scored 0: the solver does not play.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from agentic_rl.envs.arithmetic import ArithmeticEnv, ArithmeticTasks, make_arithmetic_env
from agentic_rl.envs.base import OPENING_INFO
from agentic_rl.envs.tool_env import numeric_reward
from agentic_rl.tools.calculator import evaluate_expression, format_number
from agentic_rl.types import Message, Task

ROLES = ("planner", "solver")
CREDITS = ("role", "shared")
PLANNER_PROMPT = (
    "You are the planner. Rewrite the problem as one arithmetic expression with its numbers, + - * and "
    "parentheses. Reply with the expression only."
)
SOLVER_PROMPT = "You are the solver. Compute the expression with the calculator tool, then give the result as <answer>NUMBER</answer>."
_EXPRESSION = re.compile(r"[\d\s+\-*/().]*\d[\d\s+\-*/().]*")


def planned_expression(text: str) -> str | None:
    """The expression a planner's reply gives: its first non-empty line, without code fences
    or a trailing ``=``, when that is numbers, operators and parentheses; else None."""
    lines = [line.strip().strip("`").strip() for line in text.strip().splitlines()]
    line = next((line for line in lines if line), "").rstrip("=").strip()
    return line if _EXPRESSION.fullmatch(line) else None


class ArithmeticTeamEnv:
    """The planner/solver env: ``roles`` ("planner", "solver"); the solver's conversation is
    an arithmetic ToolEnv reset on the planner's expression."""

    roles = ROLES

    def __init__(
        self,
        tasks: ArithmeticTasks,
        solver: ArithmeticEnv,
        *,
        credit: str = "role",
        planner_prompt: str = PLANNER_PROMPT,
    ) -> None:
        if credit not in CREDITS:
            raise ValueError(f"credit: expected one of {', '.join(CREDITS)}, got {credit!r}")
        self.tasks, self.solver, self.credit, self.planner_prompt = tasks, solver, credit, planner_prompt
        self.task: Task | None = None
        self.expression: str | None = None
        self.solver_options: dict[str, Any] = {}
        self.team = 0.0
        """The team's outcome: 1.0 once the solver answered the task right."""

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict]:
        """The planner's opening: its instructions and the word problem (``options["task_index"]``,
        else a task drawn with ``seed``); the other options go to the solver's reset."""
        options = dict(options or {})
        index = options.pop("task_index", None)
        self.task = self.tasks[random.Random(seed).randrange(len(self.tasks)) if index is None else index]
        options.pop("task", None)
        self.solver_options, self.expression, self.team = options, None, 0.0
        messages = [{"role": "system", "content": self.planner_prompt}, {"role": "user", "content": self.task.prompt}]
        return messages, {"task_id": self.task.id, "role": "planner"}

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("step() called before reset()")
        if self.expression is None:
            return self._plan(assistant_message["content"])
        observations, reward, terminated, truncated, info = self.solver.step(assistant_message)
        info = {**info, "role": "solver"}
        if not (terminated or truncated):
            return observations, reward, False, False, info
        team = self.team = numeric_reward(info.get("answer"), self.task)
        info.update(correct=team > 0, team_reward=team)
        if self.credit == "shared":
            return observations, team, terminated, truncated, info
        return observations, reward, terminated, truncated, {**info, "role_rewards": {"planner": 0.0}}

    def _plan(self, text: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        expression = planned_expression(text)
        try:
            value = format_number(evaluate_expression(expression)) if expression else None
        except ValueError:
            value = None
        if value is None:  # not an expression: the episode ends, the solver does not play
            return [], 0.0, True, False, {"answer": None, "correct": False, "plan_ok": False}
        self.expression = expression
        solving = Task(
            id=f"{self.task.id}-solve",
            prompt=f"What is {expression}?",
            answer=value,
            metadata={"expression": expression},
        )
        messages, opening = self.solver.reset(options={**self.solver_options, "task": solving})
        planned = float(numeric_reward(value, self.task))
        info = {"role": "solver", "plan_ok": True, **{k: opening[k] for k in OPENING_INFO if k in opening}}
        if self.credit == "role":
            info["role_rewards"] = {"planner": planned}
        return messages, 0.0, False, False, info

    def expert_reply(self) -> str:
        """The role whose turn it is, played right: the planner writes the task's expression,
        the solver calls the calculator on it and answers (``sft.collect.source: expert``)."""
        if self.task is None:
            raise RuntimeError("expert_reply() called before reset()")
        return self.task.metadata["expression"] if self.expression is None else self.solver.expert_reply()

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """``team_correct``: whether the team answered the task (whatever the credit), with
        the solver's own episode metrics once it played."""
        solver = self.solver.episode_metrics(trajectory) if self.expression is not None else {}
        return {**solver, "team_correct": self.team}

    def close(self) -> None:
        self.solver.close()


def make_arithmetic_team_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    digits: int = 3,
    num_operands: int = 3,
    operators: str = "+-*",
    credit: Literal["role", "shared"] = "role",
    planner_prompt: str = PLANNER_PROMPT,
    solver_prompt: str = SOLVER_PROMPT,
    max_turns: int = 3,
    parser: str = "hermes",
) -> ArithmeticTeamEnv:
    """Build the planner/solver env.

    Args:
        split: ``train`` or ``test`` tasks (the arithmetic env's ``words`` phrasing, its seed streams).
        credit: ``role``: each role rewarded for its own job (the planner for an expression
            whose value is the answer, the solver for answering the value of the expression it
            got); ``shared``: both for the team's outcome (the solver's answer is the task's).
        planner_prompt: The planner's system prompt.
        solver_prompt: The solver's system prompt.
        max_turns: The solver's turn limit (calculator calls and the answer).
        parser: The solver's tool-call format (``hermes``, ``llama3_json``, ...).
    """
    tasks = ArithmeticTasks(
        split=split,
        seed=seed,
        num_tasks=num_tasks,
        digits=digits,
        num_operands=num_operands,
        operators=operators,
        phrasing="words",
    )
    solver = make_arithmetic_env(
        split=split,
        seed=seed,
        digits=digits,
        num_operands=num_operands,
        operators=operators,
        system_prompt=solver_prompt,
        max_turns=max_turns,
        parser=parser,
    )
    return ArithmeticTeamEnv(tasks, solver, credit=credit, planner_prompt=planner_prompt)


make_arithmetic_team_env.options_from = make_arithmetic_env  # envs/option_docs.py reads its Args (digits, operators...)

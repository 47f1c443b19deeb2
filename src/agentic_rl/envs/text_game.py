"""Discrete-action games as text envs: the episode loop they share.

``DiscreteTextGame`` owns what every such game does the same way (RAGEN's text-game
setting): the opening prompt, one action per assistant turn parsed from
``<answer>Left</answer>`` (case-insensitive), an unparseable reply as an invalid move
(its ``invalid`` turn term, which ``reward.terms`` may weigh; the episode goes on), truncation at ``max_turns`` and per-episode
metrics. A game supplies ``start`` / ``move`` / ``render``. Our own procedurally generated
games (``frozenlake``, ``sokoban``) also use ``LevelTasks``, which keeps their train and
test levels disjoint; ``gymnasium`` (envs/gym_adapter.py) puts any Gymnasium env behind it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.envs.base import GeneratedTasks, Task
from agentic_rl.envs.terms import RewardTerm
from agentic_rl.rewards import extract_tag
from agentic_rl.types import Message

SPLITS = ("train", "test")
DEFAULT_NUM_TASKS = {"train": 10_000, "test": 1_000}


def parse_action(text: str, actions: Sequence[str]) -> int | None:
    """Index in ``actions`` of the action in the last ``<answer>`` tag (or, without a tag,
    the whole reply), matched case-insensitively; None when it names no action."""
    answer = extract_tag(text, "answer")
    candidate = (text if answer is None else answer).strip().strip(".!").strip().lower()
    lowered = [name.lower() for name in actions]
    return lowered.index(candidate) if candidate in lowered else None


@dataclass(frozen=True)
class Move:
    """What one valid action did: ``reward`` (the outcome reward; the env's own for
    Gymnasium), ``turn_reward`` (a process reward of the game's own), ``terms`` (the turn's
    named reward terms, weighed by ``reward.terms``), and whether the episode ended."""

    reward: float = 0.0
    turn_reward: float = 0.0
    terms: dict[str, float] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    solved: bool = False
    note: str = ""


class DiscreteTextGame:
    """The text Env contract over a game with named discrete actions.

    Subclasses implement ``num_tasks``, ``start(index)`` (begin level ``index``),
    ``move(action_index) -> Move`` and ``render() -> str``; ``metric_prefix`` names the
    episode metrics (``<prefix>/success``, ``/invalid_action_rate``, ``/steps``).
    """

    metric_prefix = "game"
    reward_terms = {"invalid": RewardTerm("turn", "1 for a reply that names no valid action (nothing moves)")}
    """The turn terms every game reports (``reward.terms`` weighs them; a penalty is a negative weight)."""

    def __init__(self, *, actions: Sequence[str], system_prompt: str, max_turns: int) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns: expected a positive int, got {max_turns}")
        self.actions = list(actions)
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.task_id: str | None = None
        self.turns = self.invalid_actions = 0
        self.done = self.solved = False

    @property
    def num_tasks(self) -> int:
        raise NotImplementedError

    def start(self, index: int) -> str:
        """Begin level ``index``; return its task id."""
        raise NotImplementedError

    def move(self, action: int) -> Move:
        raise NotImplementedError

    def render(self) -> str:
        raise NotImplementedError

    def render_unchanged(self) -> str:
        """What an invalid move shows of the unchanged state: by default ``render()`` again
        (a grid is the state); a game whose ``render`` is its last reply overrides it."""
        return self.render()

    def action_hint(self) -> str:
        return "Reply with one action: " + ", ".join(f"<answer>{name}</answer>" for name in self.actions) + "."

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start on level ``options["task_index"]``, else on one drawn with ``seed``."""
        options = options or {}
        index = options["task_index"] if "task_index" in options else random.Random(seed).randrange(self.num_tasks)
        if not -self.num_tasks <= index < self.num_tasks:
            raise IndexError(f"task index {index} out of range for {self.num_tasks} tasks")
        self.task_id = self.start(index % self.num_tasks)
        self.turns = self.invalid_actions = 0
        self.done = self.solved = False
        messages: list[Message] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": f"{self.render()}\n\n{self.action_hint()}"})
        return messages, {"task_id": self.task_id}

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task_id is None:
            raise RuntimeError("step() called before reset()")
        if self.done:
            raise RuntimeError("step() called after the episode ended; call reset()")
        self.turns += 1
        action = parse_action(assistant_message.get("content") or "", self.actions)
        # Named before the move: a game whose action set changes with its state (textworld's
        # admissible commands) replaces ``self.actions`` in ``move``.
        answer = None if action is None else self.actions[action]
        if action is None:
            self.invalid_actions += 1
            outcome = Move(terms={"invalid": 1.0}, note="Invalid action: nothing happened.")
        else:
            outcome = self.move(action)
        self.solved = outcome.solved
        truncated = not outcome.terminated and (outcome.truncated or self.turns >= self.max_turns)
        self.done = outcome.terminated or truncated
        info = {
            "answer": answer,
            "correct": outcome.solved,
            "turn_reward": outcome.turn_reward,
            "turn_terms": outcome.terms,
            "invalid_action": action is None,
            "format_ok": action is not None,
        }
        if self.done:
            return [], float(outcome.reward), outcome.terminated, truncated, info
        text = "\n\n".join(
            part
            for part in (
                outcome.note,
                self.render() if action is not None else self.render_unchanged(),
                self.action_hint(),
            )
            if part
        )
        return [{"role": "user", "content": text}], float(outcome.reward), False, False, info

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """Success, the share of turns with an unparseable action, and the number of turns."""
        prefix = self.metric_prefix
        return {
            f"{prefix}/success": float(self.solved),
            f"{prefix}/invalid_action_rate": self.invalid_actions / self.turns if self.turns else 0.0,
            f"{prefix}/steps": float(self.turns),
        }


# --------------------------------------------------------------------------- generated levels


class LevelTasks(GeneratedTasks):
    """Level i of ``split``: ``generate_level(rng)`` with a per-(name, split, seed, index) rng
    (the same on every machine). A level's split is a hash of its rendering, and a level
    drawn for the other split is redrawn, so train and test never share a level even when
    the grid is small enough for seed streams to collide."""

    def __init__(
        self,
        name: str,
        generate_level: Callable[[random.Random], Any],
        render: Callable[[Any], str],
        *,
        split: str,
        seed: int,
        num_tasks: int | None,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        self.size = DEFAULT_NUM_TASKS[split] if num_tasks is None else num_tasks
        if self.size < 1:
            raise ValueError(f"num_tasks: expected a positive int, got {num_tasks}")
        self.name, self.split, self.seed = name, split, seed
        self.generate_level, self.render_level = generate_level, render

    def generate(self, index: int) -> Task:
        rng = random.Random(f"{self.name}:{self.split}:{self.seed}:{index}")
        for _ in range(1_000):
            level = self.generate_level(rng)
            text = self.render_level(level)
            if level_split(text) == self.split:
                return Task(
                    id=f"{self.name}-{self.split}-{self.seed}-{index}",
                    prompt=text,
                    answer="",
                    metadata={"level": level},
                )
        raise RuntimeError(
            f"{self.name}: no {self.split} level found in 1000 draws; the grid options allow too few levels"
        )


def level_split(text: str) -> str:
    """One in eight distinct levels belongs to the test split."""
    return "test" if hashlib.sha256(text.encode()).digest()[0] % 8 == 0 else "train"

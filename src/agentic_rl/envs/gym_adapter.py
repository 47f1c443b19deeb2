"""Discrete-action games as text envs: one shared episode loop, and ``gymnasium``, the
adapter that puts any Gymnasium env with a Discrete action space behind it.

``DiscreteTextGame`` owns what every such game does the same way (RAGEN's text-game
setting): the opening prompt, one action per assistant turn parsed from
``<answer>Left</answer>`` (case-insensitive), an unparseable reply as an invalid move with
a small penalty (the episode goes on), truncation at ``max_turns`` and per-episode
metrics. A game supplies ``start`` / ``move`` / ``render``. Our own procedurally generated
games (``frozenlake``, ``sokoban``) also use ``LevelTasks`` here, which keeps their train
and test levels disjoint.
"""

from __future__ import annotations

import hashlib
import importlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rl.envs.base import GeneratedTasks, Task
from agentic_rl.rewards import extract_tag
from agentic_rl.types import Message

SPLITS = ("train", "test")
DEFAULT_NUM_TASKS = {"train": 10_000, "test": 1_000}
INSTALL_HINT = "the gymnasium env needs gymnasium: pip install 'agentic-rl[gym]'"


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
    Gymnasium), ``turn_reward`` (per-step shaping), and whether the episode ended."""

    reward: float = 0.0
    turn_reward: float = 0.0
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

    def __init__(self, *, actions: Sequence[str], system_prompt: str, max_turns: int, invalid_penalty: float) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns: expected a positive int, got {max_turns}")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty: expected a number >= 0, got {invalid_penalty}")
        self.actions = list(actions)
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.invalid_penalty = float(invalid_penalty)
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

    def action_hint(self) -> str:
        return "Reply with one action: " + ", ".join(f"<answer>{name}</answer>" for name in self.actions) + "."

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
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
        if action is None:
            self.invalid_actions += 1
            outcome = Move(turn_reward=-self.invalid_penalty, note="Invalid action: nothing happened.")
        else:
            outcome = self.move(action)
        self.solved = outcome.solved
        truncated = not outcome.terminated and (outcome.truncated or self.turns >= self.max_turns)
        self.done = outcome.terminated or truncated
        info = {
            "answer": None if action is None else self.actions[action],
            "correct": outcome.solved,
            "turn_reward": outcome.turn_reward,
            "invalid_action": action is None,
        }
        if self.done:
            return [], float(outcome.reward), outcome.terminated, truncated, info
        text = "\n\n".join(part for part in (outcome.note, self.render(), self.action_hint()) if part)
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

    def __init__(self, name: str, generate_level: Callable[[random.Random], Any], render: Callable[[Any], str], *, split: str, seed: int, num_tasks: int | None) -> None:
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
                return Task(id=f"{self.name}-{self.split}-{self.seed}-{index}", prompt=text, answer="", metadata={"level": level})
        raise RuntimeError(f"{self.name}: no {self.split} level found in 1000 draws; the grid options allow too few levels")


def level_split(text: str) -> str:
    """One in eight distinct levels belongs to the test split."""
    return "test" if hashlib.sha256(text.encode()).digest()[0] % 8 == 0 else "train"


# --------------------------------------------------------------------------- Gymnasium


def import_callable(path: str, option: str) -> Callable[..., Any]:
    module_name, _, attribute = path.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attribute) if attribute else None
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{option}: cannot import {path!r}: {type(exc).__name__}: {exc}") from None
    if not callable(function):
        raise ValueError(f"{option}: expected an import path 'module:function', got {path!r}")
    return function


_HIGHLIGHT = re.compile(r"\x1b\[4[0-7]m(.*?)\x1b\[0m", re.DOTALL)
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def plain_text(ansi: str) -> str:
    """An ansi rendering without terminal colours. Gymnasium's toy-text envs mark the agent
    only by a background highlight (FrozenLake's red cell), so highlighted text becomes
    ``[text]`` instead of vanishing."""
    return _ESCAPE.sub("", _HIGHLIGHT.sub(r"[\1]", ansi))


class GymnasiumEnv(DiscreteTextGame):
    """A Gymnasium env with text observations: its ``ansi`` rendering, or
    ``observation_formatter(observation, env) -> str``. Reward, terminated and truncated are
    the env's; task i resets it with seed i (test seeds start at ``TEST_SEED_OFFSET``)."""

    TEST_SEED_OFFSET = 1_000_000
    metric_prefix = "gym"

    def __init__(self, env, *, actions: Sequence[str], split: str, num_tasks: int, formatter: Callable[[Any, Any], str] | None, **game) -> None:
        super().__init__(actions=actions, **game)
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        if num_tasks < 1:
            raise ValueError(f"num_tasks: expected a positive int, got {num_tasks}")
        self.env, self.split, self.size, self.formatter = env, split, num_tasks, formatter
        self.start_action = int(env.action_space.start)
        self.observation: Any = None

    @property
    def num_tasks(self) -> int:
        return self.size

    def start(self, index: int) -> str:
        seed = index + (self.TEST_SEED_OFFSET if self.split == "test" else 0)
        self.observation, _ = self.env.reset(seed=seed)
        return f"gym-{self.env.spec.id if self.env.spec else 'env'}-{self.split}-{index}"

    def move(self, action: int) -> Move:
        self.observation, reward, terminated, truncated, _ = self.env.step(action + self.start_action)
        # Gymnasium has no success flag; a positive reward on the terminating step is the
        # convention of its goal-reaching envs (FrozenLake, CliffWalking's cousins).
        return Move(reward=float(reward), terminated=bool(terminated), truncated=bool(truncated), solved=bool(terminated and reward > 0))

    def render(self) -> str:
        if self.formatter is not None:
            return str(self.formatter(self.observation, self.env))
        return plain_text(str(self.env.render())).strip("\n")

    def close(self) -> None:
        self.env.close()


def make_gymnasium_env(
    *,
    env_id: str = "FrozenLake-v1",
    env_kwargs: dict[str, Any] | None = None,
    actions: Sequence[str] | None = None,
    observation_formatter: str | None = None,
    system_prompt: str | None = None,
    split: str = "train",
    num_tasks: int = 1_000,
    max_turns: int = 100,
    invalid_penalty: float = 0.1,
) -> GymnasiumEnv:
    """Any Gymnasium env with a Discrete action space as a text env (``env_id``, ``env_kwargs``);
    ``actions`` names the actions in order (e.g. ["Left", "Down", "Right", "Up"] for
    FrozenLake-v1), ``observation_formatter`` ('module:function') replaces the ansi rendering."""
    try:
        import gymnasium
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    formatter = import_callable(observation_formatter, "observation_formatter") if observation_formatter else None
    kwargs = dict(env_kwargs or {})
    if formatter is None:
        kwargs.setdefault("render_mode", "ansi")
    try:
        env = gymnasium.make(env_id, **kwargs)
    except gymnasium.error.Error as exc:
        raise ValueError(f"env_id: cannot make {env_id!r}: {exc}") from None
    if not isinstance(env.action_space, gymnasium.spaces.Discrete):
        env.close()
        raise ValueError(f"env_id: {env_id!r} has a {type(env.action_space).__name__} action space; only Discrete is supported")
    count = int(env.action_space.n)
    names = [str(i) for i in range(count)] if actions is None else [str(name) for name in actions]
    if len(names) != count or len({name.lower() for name in names}) != count:
        env.close()
        raise ValueError(f"actions: expected {count} distinct names for {env_id!r}'s Discrete({count}) space, got {list(names)}")
    if system_prompt is None:
        system_prompt = f"You play the Gymnasium game {env_id}. Each turn, choose one action."
    return GymnasiumEnv(
        env, actions=names, split=split, num_tasks=num_tasks, formatter=formatter,
        system_prompt=system_prompt, max_turns=max_turns, invalid_penalty=invalid_penalty,
    )

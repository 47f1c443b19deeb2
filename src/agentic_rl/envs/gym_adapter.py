"""``gymnasium``: any Gymnasium env with a Discrete action space as a text env, behind the
shared text-game loop (envs/text_game.py): text observations (``render_mode="ansi"`` or an
observation formatter named by import path) and named actions; reward, terminated and
truncated are the env's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.envs.text_game import SPLITS, DiscreteTextGame, Move
from agentic_rl.imports import import_object

INSTALL_HINT = "pip install 'agentic-rl[gym]'"

# --------------------------------------------------------------------------- Gymnasium


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

    def __init__(
        self,
        env,
        *,
        actions: Sequence[str],
        split: str,
        num_tasks: int,
        formatter: Callable[[Any, Any], str] | None,
        **game,
    ) -> None:
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
        return Move(
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            solved=bool(terminated and reward > 0),
        )

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
) -> GymnasiumEnv:
    """Any Gymnasium env with a Discrete action space as a text env (the ``[gym]`` extra): one
    named action per turn; reward, terminated and truncated are the env's, and a step that
    terminates with a positive reward counts as solved.

    Args:
        env_id: The Gymnasium id to make (``gymnasium.make``), e.g. ``FrozenLake-v1``; its action
            space must be Discrete.
        env_kwargs: Keyword arguments for ``gymnasium.make``; ``render_mode`` is ``ansi`` unless
            they set it or an ``observation_formatter`` is given.
        actions: The actions' names, one per action of the space in order (distinct, ignoring
            case), e.g. ["Left", "Down", "Right", "Up"] for FrozenLake-v1; the model answers with
            one. None: the action numbers 0 .. n-1.
        observation_formatter: Import path ``module:function`` of a ``function(observation, env)
            -> str`` that renders what the model sees. None: the env's ``ansi`` rendering without
            colours (a highlighted cell, such as the agent's, shown as ``[text]``).
        split: ``train`` or ``test``: task i resets the env with seed i, or 1,000,000 + i for test.
    """
    from agentic_rl.optional import require

    gymnasium = require("gymnasium", INSTALL_HINT, "the gymnasium env")
    formatter = import_object(observation_formatter, "observation_formatter") if observation_formatter else None
    kwargs = dict(env_kwargs or {})
    if formatter is None:
        kwargs.setdefault("render_mode", "ansi")
    try:
        env = gymnasium.make(env_id, **kwargs)
    except gymnasium.error.Error as exc:
        raise ValueError(f"env_id: cannot make {env_id!r}: {exc}") from None
    if not isinstance(env.action_space, gymnasium.spaces.Discrete):
        env.close()
        raise ValueError(
            f"env_id: {env_id!r} has a {type(env.action_space).__name__} action space; only Discrete is supported"
        )
    count = int(env.action_space.n)
    names = [str(i) for i in range(count)] if actions is None else [str(name) for name in actions]
    if len(names) != count or len({name.lower() for name in names}) != count:
        env.close()
        raise ValueError(
            f"actions: expected {count} distinct names for {env_id!r}'s Discrete({count}) space, got {list(names)}"
        )
    if system_prompt is None:
        system_prompt = f"You play the Gymnasium game {env_id}. Each turn, choose one action."
    return GymnasiumEnv(
        env,
        actions=names,
        split=split,
        num_tasks=num_tasks,
        formatter=formatter,
        system_prompt=system_prompt,
        max_turns=max_turns,
    )

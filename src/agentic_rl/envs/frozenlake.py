"""``frozenlake``: walk from the start to the goal on a procedurally generated frozen lake
without falling into a hole; one move per assistant turn.

Follows RAGEN's FrozenLake text env (ragen/env/frozen_lake: random map with a guaranteed
path, symbols P _ O G, reward 1 on reaching the goal, 0 for a hole), without the slippery
ice: moves are deterministic. Holes end the episode with reward 0. The outcome ``reward``
is 1 on success; each move and each invalid reply are the ``step`` and ``invalid`` turn
terms (``info["turn_terms"]``), which ``reward.terms`` may weigh (e.g. -0.01 and -0.1).

``view`` chooses what the model is shown of the same lake: ``grid`` (RAGEN's symbols, row
by row) or ``relative`` (where the goal and each hole lie from the player, and what is on
each side of it). A small model cannot locate ``P`` against ``G`` across the grid's lines:
the relative view states those offsets in words, the same information.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, replace

from agentic_rl.envs.terms import RewardTerm
from agentic_rl.envs.text_game import DiscreteTextGame, LevelTasks, Move

ACTIONS = ("Up", "Down", "Left", "Right")
DELTAS = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
SYSTEM_PROMPT = (
    "You are solving the FrozenLake puzzle: walk from your position to the goal without "
    "falling into a hole.\n"
    "Symbols: P you | _ frozen ice | O hole | G goal | X you in a hole | √ you on the goal.\n"
    "Moving off the grid leaves you where you are. Answer with one move per turn, e.g. "
    "<answer>Left</answer> (Up, Down, Left or Right)."
)
RELATIVE_SYSTEM_PROMPT = (
    "You are solving the FrozenLake puzzle: walk to the goal without falling into a hole.\n"
    "Each turn you are told where the goal and the holes are from you (rows up or down, "
    "columns left or right) and what is on each side of you: ice, hole, goal or edge.\n"
    "Moving into an edge leaves you where you are. Answer with one move per turn, e.g. "
    "<answer>Left</answer> (Up, Down, Left or Right)."
)
VIEWS = ("grid", "relative")

Cell = tuple[int, int]


@dataclass(frozen=True)
class Lake:
    size: int
    start: Cell
    goal: Cell
    holes: frozenset[Cell]


def render(lake: Lake, player: Cell | None = None) -> str:
    """Rows of space-separated symbols (spaces keep one cell per token for small models)."""
    player = lake.start if player is None else player
    rows = []
    for r in range(lake.size):
        cells = []
        for c in range(lake.size):
            cell = (r, c)
            if cell == player:
                cells.append("X" if cell in lake.holes else "√" if cell == lake.goal else "P")
            else:
                cells.append("O" if cell in lake.holes else "G" if cell == lake.goal else "_")
        rows.append(" ".join(cells))
    return "\n".join(rows)


def offset_words(player: Cell, cell: Cell) -> str:
    """Where ``cell`` lies from ``player``: ``1 up, 2 right``; ``here`` for the same cell."""
    rows, cols = cell[0] - player[0], cell[1] - player[1]
    parts = [f"{abs(rows)} {'up' if rows < 0 else 'down'}"] if rows else []
    parts += [f"{abs(cols)} {'left' if cols < 0 else 'right'}"] if cols else []
    return ", ".join(parts) or "here"


def render_relative(lake: Lake, player: Cell | None = None) -> str:
    """The lake from the player: the goal's and each hole's offset (nearest hole first),
    then the cell on each side (``edge`` where a move would leave the grid)."""
    player = lake.start if player is None else player
    holes = sorted(lake.holes, key=lambda h: (abs(h[0] - player[0]) + abs(h[1] - player[1]), h))
    sides = []
    for action in ACTIONS:
        cell = step_cell(lake.size, player, action)
        sides.append(
            f"{action} {'edge' if cell == player else 'hole' if cell in lake.holes else 'goal' if cell == lake.goal else 'ice'}"
        )
    return "\n".join(
        [
            f"Goal: {offset_words(player, lake.goal)}.",
            f"Holes: {'; '.join(offset_words(player, hole) for hole in holes) or 'none'}.",
            f"Next to you: {', '.join(sides)}.",
        ]
    )


def step_cell(size: int, cell: Cell, action: str) -> Cell:
    dr, dc = DELTAS[action]
    r, c = cell[0] + dr, cell[1] + dc
    return (r, c) if 0 <= r < size and 0 <= c < size else cell


def shortest_path(lake: Lake) -> list[str] | None:
    """The moves of a shortest hole-free path from start to goal (BFS), or None."""
    previous: dict[Cell, tuple[Cell, str] | None] = {lake.start: None}
    queue = deque([lake.start])
    while queue:
        cell = queue.popleft()
        if cell == lake.goal:
            path = []
            while previous[cell] is not None:
                cell, action = previous[cell]
                path.append(action)
            return path[::-1]
        for action in ACTIONS:
            nxt = step_cell(lake.size, cell, action)
            if nxt not in previous and nxt not in lake.holes:
                previous[nxt] = (cell, action)
                queue.append(nxt)
    return None


def generator(size: int, num_holes: int):
    def generate(rng: random.Random) -> Lake:
        # Rejection sampling. The goal is at least ``size - 1`` moves away (for size > 2), so
        # the lake is a plan and not a one-move guess: random play scores near 0.
        while True:
            cells = rng.sample([(r, c) for r in range(size) for c in range(size)], num_holes + 2)
            lake = Lake(size, cells[0], cells[1], frozenset(cells[2:]))
            path = shortest_path(lake)
            if path is not None and len(path) >= min(size - 1, 2 * size - 4):
                return lake

    return generate


class FrozenLakeEnv(DiscreteTextGame):
    metric_prefix = "frozenlake"
    reward_terms = {
        **DiscreteTextGame.reward_terms,
        "step": RewardTerm("turn", "1 for each valid move (a negative weight favours short paths)"),
    }

    def __init__(self, tasks: LevelTasks, *, success_reward: float, view: str = "grid", **game) -> None:
        if view not in VIEWS:
            raise ValueError(f"view: expected one of {', '.join(VIEWS)}, got {view!r}")
        super().__init__(actions=ACTIONS, **game)
        self.tasks, self.success_reward = tasks, success_reward
        self.draw = render_relative if view == "relative" else render
        self.lake: Lake | None = None
        self.player: Cell = (0, 0)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def start(self, index: int) -> str:
        task = self.tasks[index]
        self.lake, self.player = task.metadata["level"], task.metadata["level"].start
        return task.id

    def move(self, action: int) -> Move:
        assert self.lake is not None
        self.player = step_cell(self.lake.size, self.player, ACTIONS[action])
        if self.player in self.lake.holes:
            return Move(terms={"step": 1.0}, terminated=True, note="You fell into a hole.")
        if self.player == self.lake.goal:
            return Move(reward=self.success_reward, terms={"step": 1.0}, terminated=True, solved=True)
        return Move(terms={"step": 1.0})

    def render(self) -> str:
        assert self.lake is not None
        return self.draw(self.lake, self.player)

    def expert_reply(self) -> str:
        """The scripted expert's next move: the first step of a shortest hole-free path from
        the current cell (cold-start data, ``sft.collect.source: expert``)."""
        if self.lake is None:
            raise ValueError("expert_reply: no level is loaded (call reset first)")
        path = shortest_path(replace(self.lake, start=self.player))
        if not path:
            raise ValueError("expert_reply: the goal cannot be reached from here (the episode is over)")
        return f"<answer>{path[0]}</answer>"


def make_frozenlake_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    size: int = 4,
    num_holes: int = 3,
    max_turns: int = 12,
    success_reward: float = 1.0,
    view: str = "grid",
    system_prompt: str | None = None,
) -> FrozenLakeEnv:
    """Build the frozenlake env: a square lake with holes and a guaranteed hole-free path of at
    least ``size - 1`` moves (for size > 2) from the start to the goal; level i of each split is
    the same on every machine, whatever the ``view``.

    Args:
        size: Side of the lake, in cells: an int in [2, 16].
        num_holes: Holes on the lake: an int in [0, size * size // 2]. Falling into one ends the
            episode with outcome reward 0.
        view: What the model is shown of the lake each turn: ``grid`` (RAGEN's symbols, row by
            row) or ``relative`` (the goal's and each hole's offset from the player in words, and
            what is on each side of it). Both show the same levels; the default system prompt
            follows the view.
    """
    if not 2 <= size <= 16:
        raise ValueError(f"size: expected an int in [2, 16], got {size}")
    if not 0 <= num_holes <= size * size // 2:
        raise ValueError(f"num_holes: expected an int in [0, {size * size // 2}] for size {size}, got {num_holes}")
    # Levels (and the train/test split, a hash of the grid) do not depend on the view.
    tasks = LevelTasks("frozenlake", generator(size, num_holes), render, split=split, seed=seed, num_tasks=num_tasks)
    if system_prompt is None:  # an unknown view is FrozenLakeEnv's error
        system_prompt = RELATIVE_SYSTEM_PROMPT if view == "relative" else SYSTEM_PROMPT
    return FrozenLakeEnv(
        tasks,
        success_reward=success_reward,
        view=view,
        system_prompt=system_prompt,
        max_turns=max_turns,
    )

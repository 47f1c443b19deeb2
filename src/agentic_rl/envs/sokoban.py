"""``sokoban``: push every box onto a target in a procedurally generated room; one move per
assistant turn.

Levels are made the way gym-sokoban (and RAGEN, which uses it) makes them: carve a room
by a random walk, put the boxes on their targets, then play backwards (the player walks
and pulls boxes). Every pull undoes as a push, so every level is solvable. Where
gym-sokoban explores reverse moves by depth-first search and scores box displacement, we
search breadth-first and keep a deepest state up to ``max_solution_steps``, so a level's
depth is its exact shortest solution length. Rendering and rewards follow RAGEN's text
Sokoban (symbols # _ O X P √ S; gym-sokoban's -0.1 per step, +-1 per box on / off a
target and +10 when solved), scaled by 1/10 so success is worth 1: the outcome ``reward``
is 1 on success; the per-step and per-box shaping are the ``step`` and ``box`` turn terms
(``info["turn_terms"]``), weighed by ``reward.terms`` (RAGEN's: step -0.01, box 0.1).
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
    "You are a Sokoban solver. Goal: push every box (X) onto a target (O).\n"
    "Symbols: # wall | _ floor | O target | X box | P you | √ box on a target | S you on a target.\n"
    "Rules: you can push a box (never pull it), only one box at a time, and nothing moves "
    "through walls. Answer with one move per turn, e.g. <answer>Left</answer> "
    "(Up, Down, Left or Right)."
)
MAX_SOLVER_STATES = 1_000_000
# Reverse play stops after this many states: it bounds generation time on big rooms.
REVERSE_PLAY_BUDGET = 20_000

Cell = tuple[int, int]


@dataclass(frozen=True)
class Room:
    height: int
    width: int
    walls: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell


def render(room: Room, player: Cell | None = None, boxes: frozenset[Cell] | None = None) -> str:
    """Rows of space-separated symbols (spaces keep one cell per token for small models)."""
    player = room.player if player is None else player
    boxes = room.boxes if boxes is None else boxes
    rows = []
    for r in range(room.height):
        cells = []
        for c in range(room.width):
            cell, on_target = (r, c), (r, c) in room.targets
            if cell in room.walls:
                cells.append("#")
            elif cell == player:
                cells.append("S" if on_target else "P")
            elif cell in boxes:
                cells.append("√" if on_target else "X")
            else:
                cells.append("O" if on_target else "_")
        rows.append(" ".join(cells))
    return "\n".join(rows)


def shift(cell: Cell, action: str, times: int = 1) -> Cell:
    dr, dc = DELTAS[action]
    return cell[0] + dr * times, cell[1] + dc * times


def push(walls: frozenset[Cell], player: Cell, boxes: frozenset[Cell], action: str) -> tuple[Cell, frozenset[Cell]]:
    """The forward rule: walk onto floor, or push one box onto free floor; else stay."""
    ahead = shift(player, action)
    if ahead in walls:
        return player, boxes
    if ahead in boxes:
        beyond = shift(player, action, 2)
        if beyond in walls or beyond in boxes:
            return player, boxes
        return ahead, (boxes - {ahead}) | {beyond}
    return ahead, boxes


def solve(room: Room, max_states: int = MAX_SOLVER_STATES) -> list[str] | None:
    """A shortest solution (BFS over player and box positions), or None if there is none
    within ``max_states`` states."""
    start = (room.player, room.boxes)
    previous: dict[tuple[Cell, frozenset[Cell]], tuple | None] = {start: None}
    queue = deque([start])
    while queue and len(previous) <= max_states:
        state = queue.popleft()
        if state[1] <= room.targets:
            path = []
            while previous[state] is not None:
                state, action = previous[state]
                path.append(action)
            return path[::-1]
        for action in ACTIONS:
            nxt = push(room.walls, *state, action)
            if nxt not in previous:
                previous[nxt] = (state, action)
                queue.append(nxt)
    return None


# --------------------------------------------------------------------------- generation


def carve(rng: random.Random, height: int, width: int) -> set[Cell]:
    """Floor cells from a random walk over the interior that carves small shapes (gym-sokoban's
    room topology: a walk of about 1.7 * (height + width) steps)."""
    shapes = [
        ((0, 0),),
        ((0, 0), (0, 1)),
        ((0, 0), (1, 0)),
        ((0, 0), (0, 1), (1, 0), (1, 1)),
        ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)),
    ]
    r, c = rng.randrange(1, height - 1), rng.randrange(1, width - 1)
    direction = rng.choice(ACTIONS)
    floor: set[Cell] = set()
    for _ in range(int(1.7 * (height + width))):
        for dr, dc in rng.choice(shapes):
            if 1 <= r + dr < height - 1 and 1 <= c + dc < width - 1:
                floor.add((r + dr, c + dc))
        if rng.random() < 0.35:
            direction = rng.choice(ACTIONS)
        nr, nc = shift((r, c), direction)
        if 1 <= nr < height - 1 and 1 <= nc < width - 1:
            r, c = nr, nc
    return floor


def reverse_moves(walls: frozenset[Cell], player: Cell, boxes: frozenset[Cell]):
    """States one move back: the player steps away, optionally pulling the box behind it.
    Each is the forward push (or walk) in the opposite direction, undone."""
    for action in ACTIONS:
        ahead, behind = shift(player, action), shift(player, action, -1)
        if ahead in walls or ahead in boxes:
            continue
        yield ahead, boxes
        if behind in boxes:
            yield ahead, (boxes - {behind}) | {player}


def reverse_play(
    walls: frozenset[Cell], floor: set[Cell], targets: frozenset[Cell], max_depth: int, budget: int
) -> tuple[int, list[tuple[Cell, frozenset[Cell]]]]:
    """Breadth-first reverse play from every solved state (boxes on targets, player on any
    free floor cell): a state's depth is the length of its shortest solution. Returns the
    deepest depth reached (at most ``max_depth``, within ``budget`` states) and the states
    at that depth."""
    frontier = [(cell, targets) for cell in sorted(floor - targets)]
    seen = set(frontier)
    depth = 0
    while depth < max_depth and len(seen) < budget:
        nxt = []
        for state in frontier:
            for back in reverse_moves(walls, *state):
                if back not in seen:
                    seen.add(back)
                    nxt.append(back)
        if not nxt:
            break
        frontier, depth = nxt, depth + 1
    return depth, frontier


def generator(height: int, width: int, num_boxes: int, max_solution_steps: int):
    def generate(rng: random.Random) -> Room:
        while True:  # a draw fails when the carved room is too small or too cramped to be hard
            floor = carve(rng, height, width)
            if len(floor) < 2 * num_boxes + 2:
                continue
            walls = frozenset((r, c) for r in range(height) for c in range(width)) - floor
            targets = frozenset(rng.sample(sorted(floor), num_boxes))
            depth, deepest = reverse_play(walls, floor, targets, max_solution_steps, REVERSE_PLAY_BUDGET)
            if depth >= max(1, max_solution_steps // 2):
                # The hardest level this room allows up to the cap; sorted so the
                # choice depends on the rng only, not on set iteration order.
                player, boxes = rng.choice(sorted(deepest, key=lambda s: (s[0], sorted(s[1]))))
                return Room(height, width, walls, targets, boxes, player)

    return generate


# --------------------------------------------------------------------------- env


class SokobanEnv(DiscreteTextGame):
    metric_prefix = "sokoban"
    reward_terms = {
        **DiscreteTextGame.reward_terms,
        "step": RewardTerm("turn", "1 for each valid move (a negative weight favours short solutions)"),
        "box": RewardTerm("turn", "boxes the move pushed onto a target, minus those it pushed off one"),
    }

    def __init__(self, tasks: LevelTasks, *, success_reward: float, **game) -> None:
        super().__init__(actions=ACTIONS, **game)
        self.tasks, self.success_reward = tasks, success_reward
        self.room: Room | None = None
        self.player: Cell = (0, 0)
        self.boxes: frozenset[Cell] = frozenset()

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def start(self, index: int) -> str:
        task = self.tasks[index]
        self.room = task.metadata["level"]
        self.player, self.boxes = self.room.player, self.room.boxes
        return task.id

    def move(self, action: int) -> Move:
        assert self.room is not None
        on_target_before = len(self.boxes & self.room.targets)
        self.player, self.boxes = push(self.room.walls, self.player, self.boxes, ACTIONS[action])
        on_target = len(self.boxes & self.room.targets)
        solved = self.boxes <= self.room.targets
        terms = {"step": 1.0, "box": float(on_target - on_target_before)}
        return Move(reward=self.success_reward if solved else 0.0, terms=terms, terminated=solved, solved=solved)

    def render(self) -> str:
        assert self.room is not None
        return render(self.room, self.player, self.boxes)

    def expert_reply(self) -> str:
        """The scripted expert's next move: the first step of a shortest solution from the
        current player and box positions (cold-start data, ``sft.collect.source: expert``)."""
        if self.room is None:
            raise ValueError("expert_reply: no level is loaded (call reset first)")
        plan = solve(replace(self.room, player=self.player, boxes=self.boxes))
        if not plan:
            raise ValueError("expert_reply: the room cannot be solved from here (a box is stuck, or it is solved)")
        return f"<answer>{plan[0]}</answer>"


def make_sokoban_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    height: int = 6,
    width: int = 6,
    num_boxes: int = 1,
    max_solution_steps: int = 8,
    max_turns: int = 20,
    success_reward: float = 1.0,
    system_prompt: str = SYSTEM_PROMPT,
) -> SokobanEnv:
    """Build the sokoban env: a generated room with boxes to push onto as many targets,
    solvable by construction; level i of each split is the same on every machine.

    Args:
        height: Rows of the room, walls included: an int in [5, 12].
        width: Columns of the room, walls included: an int in [5, 12].
        num_boxes: Boxes in the room (and as many targets): an int in [1, 4].
        max_solution_steps: Longest shortest solution, in moves: every level is solvable in at
            most this many and needs at least half as many (rounded down, at least 1). An int
            in [1, 100].
        success_reward: Outcome reward of the move that puts the last box on a target; the
            episode ends there.
    """
    for option, value in (("height", height), ("width", width)):
        if not 5 <= value <= 12:
            raise ValueError(f"{option}: expected an int in [5, 12], got {value}")
    if not 1 <= num_boxes <= 4:
        raise ValueError(f"num_boxes: expected an int in [1, 4], got {num_boxes}")
    if not 1 <= max_solution_steps <= 100:
        raise ValueError(f"max_solution_steps: expected an int in [1, 100], got {max_solution_steps}")
    tasks = LevelTasks(
        "sokoban",
        generator(height, width, num_boxes, max_solution_steps),
        render,
        split=split,
        seed=seed,
        num_tasks=num_tasks,
    )
    return SokobanEnv(
        tasks,
        success_reward=success_reward,
        system_prompt=system_prompt,
        max_turns=max_turns,
    )

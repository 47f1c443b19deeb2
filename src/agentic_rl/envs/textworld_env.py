"""``textworld``: text adventures generated locally by TextWorld (``tw-make custom``), played
one command per assistant turn behind the shared text-game loop (envs/text_game.py).

Each turn the model sees the game's reply without TextWorld's ASCII banner and status line
and, by default, the admissible commands (TextWorld's list of the commands that make sense
in the current state); it answers ``<answer>take keycard</answer>``, one of those commands
in any case. A reply that names none is an invalid move: a small penalty, the game does not
see it, and the next observation says so and lists the commands (not the last reply again). The outcome reward of a step is the score it gained over the game's maximum times
``score_reward``, plus ``win_reward`` on winning: following the walkthrough earns
``score_reward + win_reward`` (1 by default). Losing ends the episode without the bonus.
"""

from __future__ import annotations

import re
from typing import Any

from agentic_rl.envs.text_game import DiscreteTextGame, Move
from agentic_rl.envs.textworld_games import GenerationOptions, TextWorldGames, import_textworld

SYSTEM_PROMPT = (
    "You are playing a text adventure. Read the game's text and reach the goal it sets.\n"
    "Each turn, answer with one command from the admissible commands, e.g. "
    "<answer>open the chest</answer>."
)

# Banner lines are drawn only with these characters; no line of game prose is.
_BANNER_LINE = re.compile(r"^[ _|\\/$<>]*[_|\\/$][ _|\\/$<>]*$")
# The prompt and the status line TextWorld prints after every reply: ">  -= Kitchen =-0/3".
_STATUS = re.compile(r"\n>\s*(-=.*?=-\s*\d+/\d+)?\s*$", re.DOTALL)


def clean_feedback(text: str) -> str:
    """The game's reply as prose: no ASCII banner, no trailing prompt and status line, no
    runs of blank lines."""
    text = _STATUS.sub("", text)
    lines = [line.rstrip() for line in text.splitlines() if not _BANNER_LINE.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


class TextWorldEnv(DiscreteTextGame):
    """A TextWorld game per task; the action set is the current admissible commands."""

    metric_prefix = "textworld"

    def __init__(
        self, games: TextWorldGames, *, score_reward: float, win_reward: float, show_commands: bool, **game
    ) -> None:
        super().__init__(actions=(), **game)
        self.games, self.score_reward, self.win_reward, self.show_commands = (
            games,
            score_reward,
            win_reward,
            show_commands,
        )
        self.game: Any = None
        self.text = ""
        self.plan: list[str] = []
        self.score = self.max_score = 0

    @property
    def num_tasks(self) -> int:
        return len(self.games)

    def start(self, index: int) -> str:
        textworld = import_textworld()
        task = self.games[index]
        self.close()
        # policy_commands: TextWorld's winning commands from the current state (the expert).
        infos = textworld.EnvInfos(
            admissible_commands=True, policy_commands=True, score=True, max_score=True, won=True, lost=True
        )
        self.game = textworld.start(task.metadata["path"], request_infos=infos)
        state = self.game.reset()
        self._observe(state)
        self.score = int(state.score or 0)
        return task.id

    def _observe(self, state) -> None:
        self.text = clean_feedback(state.feedback or "")
        # Sorted so the listing (and the prompt) does not depend on the game's set order.
        self.actions = sorted(state.admissible_commands or [])
        self.max_score = max(int(state.max_score or 0), 1)
        self.plan = list(state.policy_commands or [])

    def move(self, action: int) -> Move:
        state, score, done = self.game.step(self.actions[action])
        gained = (int(score) - self.score) / self.max_score
        self.score = int(score)
        self._observe(state)
        won, lost = bool(state.won), bool(state.lost)
        reward = self.score_reward * gained + (self.win_reward if won else 0.0)
        # ``done`` without a win or a loss: the game stopped on its own (e.g. quit), an end too.
        return Move(reward=reward, terminated=won or lost or bool(done), solved=won)

    def render(self) -> str:
        return self.text

    def render_unchanged(self) -> str:
        """Nothing: ``render`` is the game's last reply, already in the conversation (at the
        start, the whole intro: repeating it after every invalid move made long prompts)."""
        return ""

    def expert_reply(self) -> str:
        """The scripted expert's next message: the first of TextWorld's winning commands from
        the current state (cold-start data, ``sft.collect.source: expert``)."""
        if not self.plan:
            raise ValueError("expert_reply: the game has no winning command left (call reset first)")
        return f"<answer>{self.plan[0]}</answer>"

    def action_hint(self) -> str:
        example = "<answer>look</answer>"
        if not self.show_commands:
            return f"Reply with one command, e.g. {example}."
        return "Admissible commands: " + ", ".join(self.actions) + f".\nReply with one of them, e.g. {example}."

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """The text-game metrics and the share of the game's points the episode earned."""
        return {
            **super().episode_metrics(trajectory),
            f"{self.metric_prefix}/score": self.score / self.max_score if self.max_score else 0.0,
        }

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None


def make_textworld_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    world_size: int = 2,
    num_objects: int = 4,
    quest_length: int = 2,
    max_turns: int = 10,
    score_reward: float = 0.5,
    win_reward: float = 0.5,
    show_commands: bool = True,
    cache_dir: str | None = None,
    system_prompt: str = SYSTEM_PROMPT,
) -> TextWorldEnv:
    """Build the textworld env (the ``[textworld]`` extra): task i is the game ``tw-make
    custom --world-size {world_size} --nb-objects {num_objects} --quest-length
    {quest_length}`` makes from the task's seed, compiled on first use; train and test games
    have disjoint seeds.

    Args:
        world_size: Rooms in each game (``--world-size``): an int in [1, 20].
        num_objects: Objects in each game (``--nb-objects``): an int in [0, 50].
        quest_length: Length of each game's quest, in commands (``--quest-length``): an int in
            [1, 20]. A quest too long for the world fails when the game is made.
        score_reward: Outcome reward for the game's points: each step pays the points it gained,
            divided by the game's maximum, times this (a number >= 0).
        win_reward: Outcome reward added on the step that wins the game (a number >= 0); losing
            ends the episode without it.
        show_commands: Whether each turn lists the admissible commands (TextWorld's commands
            that make sense in the current state). Either way a reply must be one of them, else
            it is an invalid move.
        cache_dir: Folder the compiled games are kept in and reused from (a subfolder per
            generation options and TextWorld version). None: ``textworld`` in the package cache
            (``~/.cache/agentic-rl``, or ``$AGENTIC_RL_CACHE``).
    """
    if not 1 <= world_size <= 20:
        raise ValueError(f"world_size: expected an int in [1, 20], got {world_size}")
    if not 0 <= num_objects <= 50:
        raise ValueError(f"num_objects: expected an int in [0, 50], got {num_objects}")
    if not 1 <= quest_length <= 20:
        raise ValueError(f"quest_length: expected an int in [1, 20], got {quest_length}")
    for option, value in (("score_reward", score_reward), ("win_reward", win_reward)):
        if value < 0:
            raise ValueError(f"{option}: expected a number >= 0, got {value}")
    games = TextWorldGames(
        GenerationOptions(world_size, num_objects, quest_length),
        split=split,
        seed=seed,
        num_tasks=num_tasks,
        folder=cache_dir,
    )
    return TextWorldEnv(
        games,
        score_reward=score_reward,
        win_reward=win_reward,
        show_commands=show_commands,
        system_prompt=system_prompt,
        max_turns=max_turns,
    )

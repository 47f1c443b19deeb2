"""TextWorld games made on demand and kept on disk: task i of a split is the game
``tw-make custom`` would make from that task's seed (TextWorld's generator API, the same
code path), compiled once by the Inform 7 compiler the ``textworld`` wheel ships.

Train and test games come from disjoint seeds (even and odd). The cache folder is keyed by
the generation options and TextWorld's version (its generator decides what a seed makes),
a game file by its seed; a game is written under a temporary name and renamed, so
processes that make the same game at once never read half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from agentic_rl.cache import cache_dir
from agentic_rl.envs.base import GeneratedTasks, Task
from agentic_rl.envs.text_game import DEFAULT_NUM_TASKS, SPLITS

INSTALL_HINT = "pip install 'agentic-rl[textworld]'"
# TextWorld's generator keeps module-level state (its knowledge base, grammar caches):
# one game is made at a time per process.
_GENERATION_LOCK = threading.Lock()


def import_textworld():
    """The ``textworld`` module, or MissingPackage (an ImportError) naming the extra to install."""
    from agentic_rl.optional import require

    require("textworld.generator", INSTALL_HINT, "the textworld env")  # the generator API lives in a submodule
    return require("textworld", INSTALL_HINT, "the textworld env")


@dataclass(frozen=True)
class GenerationOptions:
    """What ``tw-make custom`` is told: ``--world-size``, ``--nb-objects``, ``--quest-length``."""

    world_size: int
    num_objects: int
    quest_length: int

    def key(self, version: str) -> str:
        """The cache folder name: the options and the TextWorld version that made the games."""
        text = f"world_size={self.world_size},num_objects={self.num_objects},quest_length={self.quest_length},textworld={version}"
        return f"w{self.world_size}-o{self.num_objects}-q{self.quest_length}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def game_seed(split: str, seed: int, index: int) -> int:
    """The TextWorld seed of task ``index``: even for train, odd for test, so the splits
    never share a seed (below 2**31, which TextWorld's RandomState accepts)."""
    digest = hashlib.sha256(f"textworld:{seed}:{index}".encode()).digest()
    return 2 * (int.from_bytes(digest[:4], "big") % 2**30) + (split == "test")


def make_game_file(options: GenerationOptions, seed: int, folder: Path) -> Path:
    """The compiled game (``.z8`` with its ``.json``) of ``seed`` in ``folder``, made if absent."""
    path = folder / f"game-{seed}.z8"
    if path.exists():
        return path
    textworld = import_textworld()
    from textworld.generator.chaining import QuestGenerationError

    folder.mkdir(parents=True, exist_ok=True)
    tw_options = textworld.GameOptions()
    tw_options.seeds = seed
    tw_options.nb_rooms = options.world_size
    tw_options.nb_objects = options.num_objects
    tw_options.quest_length = options.quest_length
    with tempfile.TemporaryDirectory(dir=folder, prefix=".making-") as scratch:
        tw_options.path = str(Path(scratch) / path.name)
        with _GENERATION_LOCK:
            try:
                game = textworld.generator.make_game(tw_options)
            except QuestGenerationError:
                raise RuntimeError(
                    f"textworld: no quest of length {options.quest_length} in a world of {options.world_size} rooms "
                    f"with {options.num_objects} objects (seed {seed}); use a larger world_size or a shorter quest_length"
                ) from None
            made = Path(textworld.generator.compile_game(game, tw_options))
        # The .json goes first: a game whose .z8 exists always has its .json.
        os.replace(made.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(made, path)
    return path


class TextWorldGames(GeneratedTasks):
    """Task i of ``split``: the game of ``game_seed(split, seed, i)``, made on first use.
    The task's metadata holds the game file and its walkthrough (TextWorld's winning
    command sequence); the prompt is the game's objective."""

    def __init__(
        self, options: GenerationOptions, *, split: str, seed: int, num_tasks: int | None, folder: str | Path | None
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        self.size = DEFAULT_NUM_TASKS[split] if num_tasks is None else num_tasks
        if self.size < 1:
            raise ValueError(f"num_tasks: expected a positive int, got {num_tasks}")
        version = import_textworld().__version__
        root = Path(folder).expanduser() if folder is not None else cache_dir() / "textworld"
        self.options, self.split, self.seed = options, split, seed
        self.folder = root / options.key(version)

    def generate(self, index: int) -> Task:
        seed = game_seed(self.split, self.seed, index)
        path = make_game_file(self.options, seed, self.folder)
        data = json.loads(path.with_suffix(".json").read_text())
        return Task(
            id=f"textworld-{self.split}-{self.seed}-{index}",
            prompt=data.get("objective", ""),
            answer="",
            metadata={"path": str(path), "seed": seed, "walkthrough": list(data["metadata"]["walkthrough"])},
        )

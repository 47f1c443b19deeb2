"""One env over several: ``env.mix: [{name, weight, label?, **options}]``.

The mixed env's task indices are its entries' tasks laid end to end (entry k's task i is
``offsets[k] + i``), so every stage that rolls out task indices (RL, filtering, Ray rollout
workers, evaluation) runs a mix unchanged. Each episode builds only the entry its task
belongs to; the reset info names it (``info["env"]``: the entry's label). Which entry a
training step draws from, by weight, is the task schedule's job (``training.task_schedule``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.envs.registry import env_factory
from agentic_rl.envs.terms import RewardTerm, declared_terms
from agentic_rl.errors import ConfigError

MIX_ENV = "mix"
"""The registered name of the mixed env (``env.mix`` in a config sets it)."""

_ENTRY_KEYS = ("name", "weight", "label")


@dataclass(frozen=True)
class MixEntry:
    name: str
    weight: float
    label: str
    """Names the entry in metrics and tables (default: the env name; two entries of one env need their own)."""
    options: dict[str, Any]


def parse_mix(entries: Any) -> list[MixEntry]:
    """Validate ``env.mix`` -> entries; a ValueError naming ``mix[i].key`` otherwise."""
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"mix: expected a non-empty list of {{name, weight, options...}}, got {entries!r}")
    parsed: list[MixEntry] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"mix[{i}]: expected a mapping {{name, weight, options...}}, got {entry!r}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"mix[{i}].name: expected an env name, got {name!r}")
        if name == MIX_ENV:
            raise ValueError(f"mix[{i}].name: a mix cannot contain a mix")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0 or weight == float("inf"):
            raise ValueError(f"mix[{i}].weight: expected a finite number > 0, got {weight!r}")
        label = entry.get("label", name)
        if not isinstance(label, str) or not label or any(c in label for c in "@/ "):
            raise ValueError(f"mix[{i}].label: expected a non-empty name without '@', '/' or spaces, got {label!r}")
        if label == "weighted":
            raise ValueError(f"mix[{i}].label: 'weighted' names the mix-weighted metrics; choose another label")
        if label in {p.label for p in parsed}:
            raise ValueError(
                f"mix[{i}].label: two entries are labelled {label!r}; give each entry of one env its own label"
            )
        options = {key: value for key, value in entry.items() if key not in _ENTRY_KEYS}
        parsed.append(MixEntry(name, float(weight), label, options))
    return parsed


@dataclass(frozen=True)
class MixSpec:
    """A validated mix on one split: each entry's env builder and its number of tasks."""

    entries: tuple[MixEntry, ...]
    builders: tuple[Callable[[], Env], ...]
    sizes: tuple[int, ...]
    tools: tuple[Any, ...]
    """Every entry's tools (what the run must check, e.g. the sandbox for the python tool)."""
    terms: dict[str, RewardTerm]
    """Every entry's reward terms (what ``reward.terms`` may weigh)."""

    @property
    def labels(self) -> list[str]:
        return [entry.label for entry in self.entries]

    @property
    def weights(self) -> dict[str, float]:
        return {entry.label: entry.weight for entry in self.entries}

    @property
    def offsets(self) -> list[int]:
        out, total = [], 0
        for size in self.sizes:
            out.append(total)
            total += size
        return out

    @property
    def num_tasks(self) -> int:
        return sum(self.sizes)

    def locate(self, task_index: int) -> tuple[int, int]:
        """(entry position, the entry's own task index) of a mixed task index."""
        if not 0 <= task_index < self.num_tasks:
            raise IndexError(f"task index {task_index} out of range for {self.num_tasks} mixed tasks")
        for k, offset in reversed(list(enumerate(self.offsets))):
            if task_index >= offset:
                return k, task_index - offset
        raise AssertionError("unreachable")

    def label_of(self, task_index: int) -> str:
        return self.entries[self.locate(task_index)[0]].label

    def task_indices(self, offset: int = 0) -> list[int]:
        """Every entry's tasks from its own index ``offset`` on, interleaved (entry 0's first,
        entry 1's first, ...), so that the first N cover every entry (e.g. the difficulty filter's candidates)."""
        columns = [[start + i for i in range(offset, size)] for start, size in zip(self.offsets, self.sizes)]
        return [index for row in _interleave(columns) for index in row]

    def first_tasks(self, count: int) -> dict[str, list[int]]:
        """The first ``count`` tasks of each entry, by label (held-out evaluation)."""
        for entry, size in zip(self.entries, self.sizes):
            if count > size:
                raise ConfigError(
                    f"num_tasks: mix entry {entry.label!r} has {size} tasks in this split, asked for {count}"
                )
        return {entry.label: list(range(start, start + count)) for entry, start in zip(self.entries, self.offsets)}

    def pools(self, task_indices: Sequence[int]) -> dict[str, list[int]]:
        """``task_indices`` grouped by entry label (in mix order; every entry present)."""
        out: dict[str, list[int]] = {label: [] for label in self.labels}
        for index in task_indices:
            out[self.label_of(index)].append(index)
        return out


def _interleave(columns: list[list[int]]):
    longest = max((len(column) for column in columns), default=0)
    for i in range(longest):
        yield [column[i] for column in columns if i < len(column)]


@lru_cache(maxsize=32)
def _spec(key: str, split: str | None) -> MixSpec:
    """Built once per process for each (mix, split): every episode builds a ``MixedEnv``,
    which must not rebuild every entry to learn its size."""
    entries = parse_mix(json.loads(key))
    builders, sizes, tools, terms = [], [], [], {}
    for i, entry in enumerate(entries):
        try:
            builder = env_factory(entry.name, entry.options, split=split)
        except ConfigError as exc:
            reason = str(exc).removeprefix("env: ")
            raise ValueError(
                f"mix[{i}].name: {reason}"
                if reason.startswith("unknown env")
                else f"mix[{i}] ({entry.label}): {reason}"
            ) from None
        probe = builder()
        try:
            sizes.append(int(probe.num_tasks))
            tools.extend(getattr(probe, "tools", None) or ())
            terms.update(declared_terms(probe))
        finally:
            close = getattr(probe, "close", None)
            if callable(close):
                close()
        builders.append(builder)
    return MixSpec(tuple(entries), tuple(builders), tuple(sizes), tuple(tools), terms)


def mix_spec(mix: Any, split: str | None = None) -> MixSpec:
    """The validated spec of ``mix`` (``env.mix``) on ``split``."""
    try:
        key = json.dumps(mix, sort_keys=True)
    except TypeError:
        raise ValueError(
            f"mix: expected plain config values (lists, mappings, numbers, strings), got {mix!r}"
        ) from None
    return _spec(key, split)


class MixedEnv:
    """The entries' tasks end to end; each reset builds the env of the task's entry and
    delegates to it (attributes too: ``parser``, ``close``, ``episode_metrics``...)."""

    def __init__(self, spec: MixSpec) -> None:
        self.spec = spec
        self.num_tasks = spec.num_tasks
        self.current: Env | None = None
        """The entry env of the episode in progress."""
        self.label: str | None = None

    @property
    def tools(self):
        """The episode's tools after a reset; before one, every entry's."""
        return getattr(self.current, "tools", None) if self.current is not None else list(self.spec.tools)

    @property
    def reward_terms(self) -> dict[str, RewardTerm]:
        """Every entry's reward terms (an entry reports only its own)."""
        return self.spec.terms

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        if "task" in options:
            raise ValueError("a mixed env resets on a task index (options['task_index']), not on a task object")
        index = options.pop("task_index", None)
        if index is None:
            index = random.Random(seed).randrange(self.num_tasks)
        k, local = self.spec.locate(int(index))
        if self.current is not None:
            self.close()
        self.current, self.label = self.spec.builders[k](), self.spec.entries[k].label
        messages, info = self.current.reset(seed=seed, options={**options, "task_index": local})
        info = dict(info)
        info["env"] = self.label
        info["task_id"] = f"{self.label}/{info.get('task_id', local)}"  # ids stay distinct across entries
        return messages, info

    def step(self, assistant_message):
        if self.current is None:
            raise RuntimeError("step() before reset()")
        return self.current.step(assistant_message)

    def close(self) -> None:
        close = getattr(self.current, "close", None)
        if callable(close):
            close()

    def __getattr__(self, name: str):
        current = self.__dict__.get("current")
        if current is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(current, name)


def make_mixed_env(*, mix: list[dict[str, Any]], split: str | None = None) -> MixedEnv:
    """Several envs in one: the entries' tasks laid end to end (entry k's follow entry
    k-1's); each episode builds the env of its task's entry through the registry.

    Args:
        mix: The entries, a non-empty list of mappings ``{name, weight, label, **options}``:
            ``name`` a registered env (not ``mix``) or an import path; ``weight`` a finite
            number > 0 (1 if left out), the entry's share of training draws (the task
            schedule's); ``label`` names the entry in metrics and task ids (the env name if left
            out; no ``@``, ``/``, spaces or ``weighted``; two entries of one env need their
            own); every other key is an option of that env.
        split: Passed to every entry whose env takes a ``split``, unless its own options set
            one. None: each entry's own default.
    """
    return MixedEnv(mix_spec(mix, split))


def mixed_spec_of(env: Any) -> MixSpec | None:
    """The mix behind ``env`` (None for any other env)."""
    return env.spec if isinstance(env, MixedEnv) else None

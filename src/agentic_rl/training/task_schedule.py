"""Which training tasks each RL step uses: a seeded shuffle, reshuffled every pass; or, over
several pools (a mix's envs) and with curriculum weights, seeded weighted draws.

(Not to be confused with token sampling, ``rollout.sampling``.)
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DUPLICATE_RETRIES = 8
"""Weighted draws within one ``next`` call redraw a task already picked up to this many times
(two groups of one task in a step teach little more than one)."""


class TaskSchedule:
    """Task indices in a seeded order, ``count`` at a time; ``state_dict`` / ``load_state_dict``
    resume it mid-pass."""

    def __init__(self, task_indices: Sequence[int], seed: int | str = 0) -> None:
        if not task_indices:
            raise ValueError("no training tasks to sample from")
        self.task_indices = list(task_indices)
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._shuffled()

    def _shuffled(self) -> list[int]:
        order = list(self.task_indices)
        random.Random(f"{self.seed}:{self.epoch}").shuffle(order)
        return order

    def next(self, count: int) -> list[int]:
        """The next ``count`` task indices (distinct within a pass)."""
        picked = []
        while len(picked) < count:
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled()
            picked.append(self._order[self.position])
            self.position += 1
        return picked

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._shuffled()


@dataclass(frozen=True)
class TaskPools:
    """Training tasks split into pools (a mix's envs, by label) with the pools' weights."""

    pools: dict[str, list[int]]
    weights: dict[str, float]


class MixedTaskSchedule:
    """Tasks from several pools (a mix's entries, by label): draw n picks a pool with
    probability proportional to its weight, then a task of that pool: the next of the pool's
    own seeded shuffle, or, once task weights are set for it (the curriculum), one drawn in
    proportion to them. Draw n has its own random stream (seed, n), so a resumed run, which
    restores n, the pools' positions and the weights, draws what an uninterrupted one would."""

    def __init__(self, pools: Mapping[str, Sequence[int]], weights: Mapping[str, float], seed: int = 0) -> None:
        if not pools:
            raise ValueError("no training tasks to sample from")
        for label, indices in pools.items():
            if not indices:
                raise ValueError(
                    f"no training tasks left for mix entry {label!r} (task_offset or the difficulty filter removed them all)"
                )
            if not weights.get(label, 0) > 0:
                raise ValueError(f"mix entry {label!r}: expected a weight > 0, got {weights.get(label)!r}")
        self.seed = seed
        self.labels = list(pools)
        self.pool_weights = {label: float(weights[label]) for label in self.labels}
        """Current pool weights (the mix's, or as the curriculum reweighted them)."""
        self.schedules = {label: TaskSchedule(pools[label], seed=f"{seed}:{label}") for label in self.labels}
        self._pool_of = {index: label for label in self.labels for index in pools[label]}
        self._task_weights: dict[str, tuple[list[int], list[float]]] = {}
        self.draws = 0

    def pool_of(self, task_index: int) -> str | None:
        return self._pool_of.get(task_index)

    def set_pool_weights(self, weights: Mapping[str, float]) -> None:
        for label in self.labels:
            if not weights.get(label, 0) > 0:
                raise ValueError(f"mix entry {label!r}: expected a weight > 0, got {weights.get(label)!r}")
        self.pool_weights = {label: float(weights[label]) for label in self.labels}

    def set_task_weights(self, label: str, weights: Mapping[int, float] | None) -> None:
        """Draw pool ``label``'s tasks in proportion to ``weights`` (one per task of the pool;
        None: back to its shuffle)."""
        if weights is None:
            self._task_weights.pop(label, None)
            return
        indices = list(self.schedules[label].task_indices)
        values = [float(weights[index]) for index in indices]
        if any(not value >= 0 for value in values) or not sum(values) > 0:
            raise ValueError(f"task weights of {label!r}: expected non-negative weights with a positive sum")
        self._task_weights[label] = (indices, list(itertools.accumulate(values)))

    def next(self, count: int) -> list[int]:
        """The next ``count`` task indices."""
        picked: list[int] = []
        cumulative_pools = list(itertools.accumulate(self.pool_weights[label] for label in self.labels))
        for _ in range(count):
            rng = random.Random(f"{self.seed}:draw:{self.draws}")
            self.draws += 1
            label = self.labels[_bisect(cumulative_pools, rng.random())]
            picked.append(self._task(label, rng, set(picked)))
        return picked

    def _task(self, label: str, rng: random.Random, taken: set[int]) -> int:
        if label not in self._task_weights:
            return self.schedules[label].next(1)[0]
        indices, cumulative = self._task_weights[label]
        for _ in range(DUPLICATE_RETRIES):
            index = indices[_bisect(cumulative, rng.random())]
            if index not in taken:
                break
        return index

    def state_dict(self) -> dict:
        return {
            "draws": self.draws,
            "pools": {label: schedule.state_dict() for label, schedule in self.schedules.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restores the draw count and the pools' positions; the weights are set again by
        whoever chose them (the curriculum restores its own state)."""
        self.draws = int(state["draws"])
        for label, pool_state in state["pools"].items():
            self.schedules[label].load_state_dict(pool_state)


def _bisect(cumulative: list[float], u: float) -> int:
    """The position whose share of ``cumulative``'s total contains ``u`` in [0, 1)."""
    return min(bisect.bisect_right(cumulative, u * cumulative[-1]), len(cumulative) - 1)

"""Which training tasks each RL step uses: a seeded shuffle, reshuffled every pass.

(Not to be confused with token sampling, ``rollout.sampling``.)
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class TaskSchedule:
    """Task indices in a seeded order, ``count`` at a time; ``state_dict`` / ``load_state_dict``
    resume it mid-pass."""

    def __init__(self, task_indices: Sequence[int], seed: int = 0) -> None:
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

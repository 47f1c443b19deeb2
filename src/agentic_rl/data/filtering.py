"""Model-aware data: keep the tasks the current model sometimes, but not always, solves,
or draw them more often.

Pure selection and weighting over pass rates; running the rollouts that measure them is the
caller's job (``training.difficulty.difficulty_filter`` before RL, ``training.curriculum``
during it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K")


@dataclass
class FilterResult:
    kept: list[int]
    """Task indices whose pass rate lies in the band."""
    pass_rates: dict[int, float]
    """Pass rate per scored task index."""
    histogram: dict[str, int]
    """Number of tasks per pass rate (keys like "0.25")."""

    def to_dict(self) -> dict:
        return {
            "kept": self.kept,
            "pass_rates": {str(k): v for k, v in self.pass_rates.items()},
            "histogram": self.histogram,
        }


def select_by_pass_rate(
    pass_rates: Mapping[int, float], *, min_pass_rate: float = 0.0, max_pass_rate: float = 1.0
) -> FilterResult:
    """Keep tasks with ``min_pass_rate < pass rate < max_pass_rate``, in ``pass_rates``'
    order (defaults drop never- and always-solved tasks: their groups have zero reward
    variance and teach GRPO nothing)."""
    pass_rates = dict(pass_rates)
    kept = [index for index, rate in pass_rates.items() if min_pass_rate < rate < max_pass_rate]
    histogram = dict(sorted(Counter(f"{rate:.2f}" for rate in pass_rates.values()).items()))
    return FilterResult(kept, pass_rates, histogram)


def middle_difficulty_weights(pass_rates: Mapping[K, float], *, floor: float) -> dict[K, float]:
    """Sampling weight ``max(p * (1 - p), floor)`` per key of ``pass_rates``: largest (0.25)
    at p = 0.5, where a group's reward variance, and so GRPO's signal, peaks; tasks never
    or always solved keep the ``floor`` so they are still revisited as the model changes."""
    if not floor > 0:
        raise ValueError(f"floor: expected a number > 0, got {floor!r}")
    weights = {}
    for key, rate in pass_rates.items():
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"pass rate of {key!r}: expected a number in [0, 1], got {rate!r}")
        weights[key] = max(rate * (1.0 - rate), floor)
    return weights

"""Model-aware data: keep the tasks the current model sometimes, but not always, solves.

Pure selection over pass rates; running the rollouts that measure them is the caller's
job (``training.difficulty.difficulty_filter``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class FilterResult:
    kept: list[int]
    """Task indices whose pass rate lies in the band."""
    pass_rates: dict[int, float]
    """Pass rate per scored task index."""
    histogram: dict[str, int]
    """Number of tasks per pass rate (keys like "0.25")."""

    def to_dict(self) -> dict:
        return {"kept": self.kept, "pass_rates": {str(k): v for k, v in self.pass_rates.items()}, "histogram": self.histogram}


def select_by_pass_rate(pass_rates: Mapping[int, float], *, min_pass_rate: float = 0.0, max_pass_rate: float = 1.0) -> FilterResult:
    """Keep tasks with ``min_pass_rate < pass rate < max_pass_rate``, in ``pass_rates``'
    order (defaults drop never- and always-solved tasks: their groups have zero reward
    variance and teach GRPO nothing)."""
    pass_rates = dict(pass_rates)
    kept = [index for index, rate in pass_rates.items() if min_pass_rate < rate < max_pass_rate]
    histogram = dict(sorted(Counter(f"{rate:.2f}" for rate in pass_rates.values()).items()))
    return FilterResult(kept, pass_rates, histogram)

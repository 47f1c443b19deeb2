"""Number handling shared by the report's plots, tables and episode summaries."""

from __future__ import annotations

import math
from typing import Any


def as_number(value: Any) -> float:
    """``value`` as a float; NaN for anything that is not a real number (bools included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def format_number(value: Any) -> str:
    """Integers as is, other numbers to 3 decimals, a dash for missing / non-finite values."""
    number = as_number(value)
    if not math.isfinite(number):
        return "–"
    return f"{number:g}" if number.is_integer() else f"{number:.3f}"

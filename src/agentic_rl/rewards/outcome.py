"""Verifiable outcome rewards: pull the final answer out of a response and score it."""

from __future__ import annotations

import math
import re
from fractions import Fraction


def extract_tag(text: str, tag: str = "answer") -> str | None:
    """The content of the last ``<tag>...</tag>`` in ``text`` (stripped), or None.

    The last one counts because models often restate the format before answering.
    """
    matches = re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL)
    return matches[-1].strip() if matches else None


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def normalize_number(text: str | None) -> Fraction | None:
    """Parse a plain number ("1,234", "-7.50", "$12", "3/4") exactly; None if it is not one."""
    if text is None:
        return None
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if "/" in cleaned:
        numerator, _, denominator = cleaned.partition("/")
        if _NUMBER.match(numerator.strip()) and _NUMBER.match(denominator.strip()) and float(denominator) != 0:
            return Fraction(numerator.strip()) / Fraction(denominator.strip())
        return None
    if not _NUMBER.match(cleaned):
        return None
    value = float(cleaned)
    return Fraction(cleaned) if math.isfinite(value) else None


def numeric_match(prediction: str | None, gold: str, *, rel_tol: float = 1e-9) -> bool:
    """True when ``prediction`` is a number equal to ``gold`` (exactly, or within rel_tol)."""
    predicted, expected = normalize_number(prediction), normalize_number(gold)
    if predicted is None or expected is None:
        return False
    if predicted == expected:
        return True
    return math.isclose(float(predicted), float(expected), rel_tol=rel_tol, abs_tol=0.0)

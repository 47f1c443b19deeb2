"""Outcome rewards and answer extraction."""

from agentic_rl.rewards.math import MathVerifier, gold_answer, math_equivalent
from agentic_rl.rewards.outcome import extract_tag, normalize_number, numeric_match

__all__ = ["MathVerifier", "extract_tag", "gold_answer", "math_equivalent", "normalize_number", "numeric_match"]

"""Outcome rewards and answer extraction."""

from agentic_rl.rewards.outcome import extract_tag, normalize_number, numeric_match

__all__ = ["extract_tag", "normalize_number", "numeric_match"]

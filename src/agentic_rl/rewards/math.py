"""Math answers: the gold answer of a GSM8K-style solution, and mathematical equivalence."""

from __future__ import annotations

import logging

from agentic_rl.rewards.outcome import numeric_match


def gold_answer(text: str) -> str:
    """The final answer of a gold solution: the part after GSM8K's ``####`` if present."""
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip().replace(",", "")


def math_equivalent(prediction: str | None, gold: str) -> bool:
    """True when ``prediction`` equals ``gold`` mathematically (math-verify; plain numbers
    fall back to exact numeric comparison if math-verify is unavailable or fails)."""
    if prediction is None or not prediction.strip():
        return False
    if numeric_match(prediction, gold):
        return True
    try:
        from math_verify import parse, verify

        logging.getLogger("math_verify").setLevel(logging.ERROR)

        # Timeouts off: math-verify's timeouts use SIGALRM, which only works on the main
        # thread, and env steps run on worker threads.
        gold_parsed = parse(f"${gold}$", parsing_timeout=None)
        predicted = parse(prediction if "$" in prediction or "\\" in prediction else f"${prediction}$", parsing_timeout=None)
        return bool(gold_parsed and predicted and verify(gold_parsed, predicted, timeout_seconds=None))
    except Exception:
        return False

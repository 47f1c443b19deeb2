"""Evaluation: avg@k / pass@k / maj@k and tool metrics."""

from agentic_rl.evaluation.harness import EvalResult, evaluate
from agentic_rl.evaluation.metrics import (
    aggregate_metrics,
    avg_at_k,
    maj_at_k,
    majority_vote,
    normalize_answer,
    pass_at_k,
)

__all__ = [
    "EvalResult",
    "evaluate",
    "aggregate_metrics",
    "avg_at_k",
    "maj_at_k",
    "majority_vote",
    "normalize_answer",
    "pass_at_k",
]

"""Question-answering rewards: SQuAD answer normalization, exact match and token F1.

Follows the official SQuAD v1.1 evaluation script: lowercase, drop punctuation, drop
the articles a/an/the, collapse whitespace. Against several gold answers the best
score counts.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

__all__ = [
    "squad_normalize",
    "exact_match",
    "token_f1",
    "best_exact_match",
    "best_f1",
    "answer_in_text",
    "ANSWER_SEPARATOR",
    "split_answers",
    "per_question_exact_match",
]

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def squad_normalize(text: str) -> str:
    """Lowercase, remove punctuation and articles, collapse whitespace (SQuAD v1.1)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str | None, gold: str) -> float:
    """1.0 when the normalized prediction equals the normalized gold answer."""
    if prediction is None:
        return 0.0
    return float(squad_normalize(prediction) == squad_normalize(gold))


def token_f1(prediction: str | None, gold: str) -> float:
    """Harmonic mean of token precision and recall after normalization.

    Both empty after normalization scores 1.0; exactly one empty scores 0.0.
    """
    if prediction is None:
        return 0.0
    predicted, expected = squad_normalize(prediction).split(), squad_normalize(gold).split()
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def best_exact_match(prediction: str | None, golds: Iterable[str]) -> float:
    """Exact match against the closest of several gold answers (0.0 for no golds)."""
    return max((exact_match(prediction, gold) for gold in golds), default=0.0)


def best_f1(prediction: str | None, golds: Iterable[str]) -> float:
    """Token F1 against the closest of several gold answers (0.0 for no golds)."""
    return max((token_f1(prediction, gold) for gold in golds), default=0.0)


def answer_in_text(golds: Iterable[str], text: str) -> bool:
    """Whether some gold answer occurs in ``text`` as a whole-token span, after normalization."""
    haystack = f" {squad_normalize(text)} "
    for gold in golds:
        needle = squad_normalize(gold)
        if needle and f" {needle} " in haystack:
            return True
    return False


ANSWER_SEPARATOR = ";"
"""Separates the answers of several questions in one reply: ``<answer>A1; A2; A3</answer>``."""


def split_answers(prediction: str | None, count: int) -> list[str | None]:
    """The ``count`` answers of a multi-question reply, in order (split on
    :data:`ANSWER_SEPARATOR`); missing ones are None, extra ones are dropped."""
    parts = [] if prediction is None else [part.strip() for part in prediction.split(ANSWER_SEPARATOR)]
    return [parts[i] if i < len(parts) and parts[i] else None for i in range(count)]


def per_question_exact_match(prediction: str | None, golds: list[list[str]]) -> list[float]:
    """Exact match of each answer of a multi-question reply against its question's gold
    answers (``golds[i]``: the answers of question i)."""
    return [
        best_exact_match(answer, question_golds)
        for answer, question_golds in zip(split_answers(prediction, len(golds)), golds)
    ]

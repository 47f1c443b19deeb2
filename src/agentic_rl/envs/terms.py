"""Named reward terms: the shaping an env measures and the ``reward`` section weighs.

An env reports what it measured, never how much it is worth: ``info["reward_terms"]``
(``{name: number}``) holds episode terms, summed over the episode's steps and added to
its reward times ``reward.terms[name]``; ``info["turn_terms"]`` holds a turn's terms,
added to that turn's process reward (``info["turn_reward"]``, read by turn-level credit)
times the same weights. An env declares the terms it can report in ``reward_terms``
(name -> :class:`RewardTerm`), so a weight for a term the env never reports is a config
error, not a silent zero. Weights absent from ``reward.terms`` are 0: the env's outcome
reward alone, and the held-out evaluation always scores that outcome alone.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

EPISODE_TERMS_KEY = "reward_terms"
"""The step info key of episode terms (added to the episode's reward)."""
TURN_TERMS_KEY = "turn_terms"
"""The step info key of a turn's terms (added to its process reward)."""


@dataclass(frozen=True)
class RewardTerm:
    """A term an env can report: ``per`` says where it lands (``episode``: the episode's
    reward, so every advantage estimator sees it; ``turn``: that turn's process reward, read
    by turn-level estimators and critics), ``doc`` what one unit of it measures."""

    per: Literal["episode", "turn"]
    doc: str


def declared_terms(env: Any) -> dict[str, RewardTerm]:
    """The terms ``env`` declares (``env.reward_terms``; none when it has no such attribute)."""
    terms = getattr(env, "reward_terms", None) or {}
    if not isinstance(terms, Mapping) or not all(
        isinstance(name, str) and isinstance(term, RewardTerm) for name, term in terms.items()
    ):
        raise ValueError(f"env.reward_terms: expected a mapping of names to RewardTerm, got {terms!r}")
    return dict(terms)


def reported_terms(info: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(episode terms, turn terms) of one step's info, checked: each a mapping of names to
    finite numbers (ValueError naming the key otherwise: the env's bug)."""
    return _terms(info, EPISODE_TERMS_KEY), _terms(info, TURN_TERMS_KEY)


def _terms(info: Mapping[str, Any], key: str) -> dict[str, float]:
    terms = info.get(key)
    if terms is None:
        return {}
    if not isinstance(terms, Mapping):
        raise ValueError(f"info[{key!r}]: expected a mapping of term names to numbers, got {terms!r}")
    checked = {}
    for name, value in terms.items():
        if (
            not isinstance(name, str)
            or isinstance(value, bool)
            or not isinstance(value, numbers.Real)  # numpy numbers too
            or not math.isfinite(value)
        ):
            raise ValueError(f"info[{key!r}]: expected a finite number for each term name, got {name!r}: {value!r}")
        checked[name] = float(value)
    return checked


def weighted(terms: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Sum of each term times its weight (a term without a weight counts 0)."""
    return sum(weights.get(name, 0.0) * value for name, value in terms.items())


def unknown_weight(weights: Iterable[str], declared: Mapping[str, RewardTerm], env: str) -> str | None:
    """One line for the first weighted term ``env`` does not report, or None."""
    for name in weights:
        if name not in declared:
            offered = ", ".join(f"{n} (per {t.per}: {t.doc})" for n, t in sorted(declared.items())) or "none"
            return f"reward.terms.{name}: env {env} reports no such term; the terms it reports: {offered}"
    return None

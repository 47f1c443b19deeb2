"""Behaviour analysis: reactive vs deliberative tool use.

An episode's *mode* is read from how many tokens the policy sampled per tool call:

- ``reactive``: at most ``tokens_per_call_threshold`` sampled tokens per call (little
  reasoning, frequent calls);
- ``deliberative``: more than that (more reasoning before fewer calls);
- ``no_tool``: the episode made no tool call at all.

Malformed calls count as calls (the policy tried to call a tool). Works on
``Trajectory`` objects and on their ``to_dict()`` form (eval JSONs, ``rollouts.jsonl``),
so old run directories can be analysed too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentic_rl.types import Trajectory

__all__ = ["DEFAULT_TOKENS_PER_CALL", "MODES", "EpisodeBehaviour", "behaviour_metrics", "classify", "describe"]

MODES: tuple[str, ...] = ("reactive", "deliberative", "no_tool")
DEFAULT_TOKENS_PER_CALL = 100.0
"""A hermes tool call alone is ~25 tokens; 100 leaves room for a short sentence or two
around each call before an episode counts as deliberative."""


@dataclass(frozen=True)
class EpisodeBehaviour:
    response_tokens: int
    tool_calls: int
    successful_calls: int
    correct: bool

    @property
    def tokens_per_call(self) -> float | None:
        return self.response_tokens / self.tool_calls if self.tool_calls else None


def describe(episode: Trajectory | Mapping[str, Any]) -> EpisodeBehaviour:
    """The counts behaviour analysis needs, from a ``Trajectory`` or its ``to_dict()``."""
    if isinstance(episode, Trajectory):
        results = episode.tool_results
        return EpisodeBehaviour(
            response_tokens=episode.response_tokens,
            tool_calls=len(results),
            successful_calls=sum(r.ok and not r.malformed for r in results),
            correct=bool(episode.correct),
        )
    calls = episode.get("tool_calls") or []
    return EpisodeBehaviour(
        response_tokens=int(episode.get("response_tokens") or 0),
        tool_calls=len(calls),
        successful_calls=sum(bool(c.get("ok", True)) and not c.get("malformed", False) for c in calls),
        correct=bool(episode.get("correct", False)),
    )


def classify(
    episode: Trajectory | Mapping[str, Any] | EpisodeBehaviour,
    tokens_per_call_threshold: float = DEFAULT_TOKENS_PER_CALL,
) -> str:
    """``reactive``, ``deliberative`` or ``no_tool`` (see the module docstring)."""
    info = episode if isinstance(episode, EpisodeBehaviour) else describe(episode)
    per_call = info.tokens_per_call
    if per_call is None:
        return "no_tool"
    return "reactive" if per_call <= tokens_per_call_threshold else "deliberative"


def behaviour_metrics(
    episodes: Sequence[Trajectory | Mapping[str, Any]],
    tokens_per_call_threshold: float = DEFAULT_TOKENS_PER_CALL,
) -> dict[str, float]:
    """Flat ``behaviour/...`` metrics over episodes.

    For each mode in ``MODES``: ``behaviour/<mode>/fraction`` (of all episodes) and
    ``behaviour/<mode>/accuracy`` (among that mode's episodes); for ``reactive`` and
    ``deliberative`` also ``behaviour/<mode>/tool_success_rate`` (successful calls /
    calls). Rates of an empty mode are 0.0 (read them with the fraction). Plus
    ``behaviour/tokens_per_call_mean`` over episodes with a call (0.0 when none) and
    ``behaviour/tokens_per_call_threshold``. Empty input gives an empty dict.
    """
    if not episodes:
        return {}
    infos = [describe(e) for e in episodes]
    by_mode: dict[str, list[EpisodeBehaviour]] = {mode: [] for mode in MODES}
    for info in infos:
        by_mode[classify(info, tokens_per_call_threshold)].append(info)
    metrics: dict[str, float] = {}
    for mode, members in by_mode.items():
        metrics[f"behaviour/{mode}/fraction"] = len(members) / len(infos)
        metrics[f"behaviour/{mode}/accuracy"] = sum(m.correct for m in members) / len(members) if members else 0.0
        if mode != "no_tool":
            calls = sum(m.tool_calls for m in members)
            metrics[f"behaviour/{mode}/tool_success_rate"] = (
                sum(m.successful_calls for m in members) / calls if calls else 0.0
            )
    per_call = [info.tokens_per_call for info in infos if info.tokens_per_call is not None]
    metrics["behaviour/tokens_per_call_mean"] = sum(per_call) / len(per_call) if per_call else 0.0
    metrics["behaviour/tokens_per_call_threshold"] = float(tokens_per_call_threshold)
    return metrics

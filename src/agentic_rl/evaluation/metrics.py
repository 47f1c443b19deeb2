"""Evaluation metrics: avg@k, pass@k, maj@k and tool-use statistics.

Everything here is a pure function over plain values or ``Trajectory`` objects, so the
same numbers come out of training-time evaluation, the ``eval`` command and tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.templates.drift import template_drift_mean
from agentic_rl.types import TERMINATION_REASONS, UNKNOWN_TOOL, ToolResult, Trajectory

__all__ = [
    "aggregate_metrics",
    "avg_at_k",
    "episode_metrics_means",
    "maj_at_k",
    "majority_vote",
    "normalize_answer",
    "pass_at_k",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``.

    The probability that at least one of k samples drawn without replacement from n
    samples, c of them correct, is correct. Computed with the product form
    ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which avoids huge binomials.

    Raises:
        ValueError: if ``k < 1``, ``k > n``, ``c < 0`` or ``c > n``.
    """
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if k > n:
        raise ValueError(f"pass@k needs k <= n (samples per task), got k={k}, n={n}")
    if c < 0 or c > n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0  # every k-subset must contain a correct sample
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def avg_at_k(correct: Sequence[bool]) -> float:
    """Mean correctness of the samples of one task (avg@k with k = len(correct)).

    Raises:
        ValueError: if ``correct`` is empty.
    """
    if len(correct) == 0:
        raise ValueError("avg@k needs at least one sample")
    return sum(bool(x) for x in correct) / len(correct)


def normalize_answer(answer: str) -> tuple[str, Any]:
    """The key under which answers vote together.

    Light normalisation only: surrounding whitespace is stripped and strings that parse
    as finite numbers compare by numeric value ("42", "42.0" and " 42 " share a key).
    Anything else compares as the stripped string (case-sensitive).
    """
    stripped = answer.strip()
    try:
        value = float(stripped)
    except ValueError:
        return ("str", stripped)
    # nan/inf never compare equal in a useful way; keep them as text.
    return ("num", value) if math.isfinite(value) else ("str", stripped)


def majority_vote(answers: Sequence[str | None]) -> str | None:
    """The most common non-None answer under ``normalize_answer``.

    Ties go to the answer whose first occurrence comes earliest in ``answers``; the
    returned string is the first-seen original form of the winning answer. Returns
    None when every answer is None (or the list is empty).
    """
    counts: dict[tuple[str, Any], int] = {}
    first_form: dict[tuple[str, Any], str] = {}
    for answer in answers:
        if answer is None:
            continue
        key = normalize_answer(answer)
        counts[key] = counts.get(key, 0) + 1
        first_form.setdefault(key, answer)
    if not counts:
        return None
    # dicts keep insertion (first-seen) order and max() keeps the first maximum.
    winner = max(counts, key=lambda key: counts[key])
    return first_form[winner]


def maj_at_k(answers: Sequence[str | None], gold_is_correct: Callable[[str], bool]) -> float:
    """1.0 if the majority answer (``majority_vote``) is correct, else 0.0.

    ``gold_is_correct`` judges an answer string; a None majority scores 0.0.
    """
    majority = majority_vote(answers)
    return 1.0 if majority is not None and gold_is_correct(majority) else 0.0


def _succeeded(result: ToolResult) -> bool:
    # A malformed call is never a success, even if a producer forgot to clear ``ok``.
    return result.ok and not result.malformed


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def episode_metrics_means(samples: Sequence[Trajectory]) -> dict[str, float]:
    """Means of env-reported per-episode metrics (``trajectory.info["episode_metrics"]``,
    filled by the rollout engine from an env's ``episode_metrics`` hook), by name; each
    mean is over the samples that report that name."""
    values: dict[str, list[float]] = {}
    for trajectory in samples:
        for name, value in (trajectory.info.get("episode_metrics") or {}).items():
            values.setdefault(name, []).append(float(value))
    return {name: _mean(found) for name, found in values.items()}


def per_tool_metrics(results: Sequence[ToolResult]) -> dict[str, float]:
    """``tool/<name>/calls|success_rate|latency_ms_mean`` per ``ToolResult.name`` (calls
    naming a tool that does not exist under ``unknown_tool``)."""
    by_name: dict[str, list[ToolResult]] = {}
    for result in results:
        by_name.setdefault(UNKNOWN_TOOL if result.unknown_tool else result.name, []).append(result)
    metrics: dict[str, float] = {}
    for name, calls in by_name.items():
        metrics[f"tool/{name}/calls"] = float(len(calls))
        metrics[f"tool/{name}/success_rate"] = sum(map(_succeeded, calls)) / len(calls)
        metrics[f"tool/{name}/latency_ms_mean"] = _mean([r.latency_s * 1000.0 for r in calls])
    return metrics


def aggregate_metrics(groups: Sequence[Sequence[Trajectory]], k: int) -> dict[str, float]:
    """Flat evaluation metrics over per-task groups of n >= k sampled trajectories.

    Task-level metrics (each averaged over tasks, so every task weighs the same):

    - ``avg@{k}``: mean correctness over ALL n samples of the task.
    - ``pass@{k}``: ``pass_at_k(n, c, k)`` with c the number of correct samples.
    - ``maj@{k}``: majority vote over the answers of the FIRST k samples. The majority
      answer counts as correct when it equals (under ``normalize_answer``) the answer
      of some trajectory in the group with ``correct=True``; trajectories do not
      carry the gold answer, so correctness is borrowed from the env's own judgement.

    Sample-level metrics (averaged over all trajectories of all tasks):

    - ``mean_reward``, ``mean_turns``, ``mean_response_tokens``.
    - ``mean_segments`` (training samples per episode: more than 1 when a context policy
      cut what the model saw) and ``mean_summaries`` (summaries written, ``summarize``).
    - ``template_drift_tokens``: drift tokens per episode, where the chat template renders
      the conversation differently from the sequence grown by appending (the training
      step metric of the same name, ``agentic_rl.templates.drift``; 0.0 for none).
    - ``num_tasks``, ``num_samples``.
    - ``termination/<reason>``: fraction of samples ending with each reason in
      ``TERMINATION_REASONS`` (0.0 when absent).
    - ``infra_error_rate``: fraction of samples with ``infra_error`` set (they still
      count in every other metric, as failed samples).
    - ``episodes_with_tool_call``: fraction of samples with at least one tool result
      (malformed calls included).
    - ``correct_with_tool_call``: among correct samples, the fraction that made at
      least one successful tool call (0.0 when no sample is correct).

    Tool-call metrics (over all ``ToolResult``s; success means ``ok`` and not
    ``malformed``):

    - ``num_tool_calls``: total results, so a reader can tell "no calls" from "all
      failed".
    - ``tool_calls_per_episode``: ``num_tool_calls / num_samples``.
    - ``tool_success_rate``: successes / all results (0.0 when there are no calls).
    - ``malformed_call_rate``: malformed results / all results (0.0 when no calls).
    - env metrics: every name in ``trajectory.info["episode_metrics"]`` (see
      ``episode_metrics_means``), e.g. ``search/answer_recall`` of ``search-qa``.
    - ``tool/<name>/calls``, ``tool/<name>/success_rate``,
      ``tool/<name>/latency_ms_mean`` per ``ToolResult.name`` (calls the parser could not
      read under ``invalid_call``, calls naming a tool that does not exist under
      ``unknown_tool``: the name they gave is model text).

    Behaviour metrics: ``behaviour/<mode>/fraction|accuracy|tool_success_rate`` for
    reactive / deliberative / no_tool episodes (``evaluation.behaviour.behaviour_metrics``).

    Raises:
        ValueError: if there are no groups, ``k < 1``, or a group has fewer than k
            samples.
    """
    if not groups:
        raise ValueError("aggregate_metrics needs at least one task group")
    if k < 1:
        raise ValueError(f"aggregate_metrics needs k >= 1, got k={k}")
    for index, group in enumerate(groups):
        if len(group) < k:
            raise ValueError(f"task group {index} has {len(group)} samples, fewer than k={k}")

    avg_scores, pass_scores, maj_scores = [], [], []
    for group in groups:
        correct = [t.correct for t in group]
        avg_scores.append(avg_at_k(correct))
        pass_scores.append(pass_at_k(len(group), sum(correct), k))
        correct_keys = {normalize_answer(t.answer) for t in group if t.correct and t.answer is not None}
        maj_scores.append(maj_at_k([t.answer for t in group[:k]], lambda a: normalize_answer(a) in correct_keys))

    samples = [t for group in groups for t in group]
    results = [r for t in samples for r in t.tool_results]
    num_samples, num_calls = len(samples), len(results)

    metrics: dict[str, float] = {
        f"avg@{k}": _mean(avg_scores),
        f"pass@{k}": _mean(pass_scores),
        f"maj@{k}": _mean(maj_scores),
        "mean_reward": _mean([t.reward for t in samples]),
        "mean_turns": _mean([t.num_turns for t in samples]),
        "mean_response_tokens": _mean([t.response_tokens for t in samples]),
        "mean_segments": _mean([len(t.samples) for t in samples]),
        "mean_summaries": _mean([t.summary_turns for t in samples]),
        "template_drift_tokens": template_drift_mean(samples),
        "num_tasks": float(len(groups)),
        "num_samples": float(num_samples),
        "infra_error_rate": sum(t.infra_error is not None for t in samples) / num_samples,
        "num_tool_calls": float(num_calls),
        "tool_calls_per_episode": num_calls / num_samples,
        "tool_success_rate": sum(map(_succeeded, results)) / num_calls if num_calls else 0.0,
        "malformed_call_rate": sum(r.malformed for r in results) / num_calls if num_calls else 0.0,
        "episodes_with_tool_call": sum(bool(t.tool_results) for t in samples) / num_samples,
    }

    correct_samples = [t for t in samples if t.correct]
    metrics["correct_with_tool_call"] = _mean([float(any(map(_succeeded, t.tool_results))) for t in correct_samples])

    for reason in TERMINATION_REASONS:
        metrics[f"termination/{reason}"] = sum(t.termination_reason == reason for t in samples) / num_samples

    metrics.update(episode_metrics_means(samples))

    metrics.update(per_tool_metrics(results))
    # Reactive vs deliberative tool use (``behaviour/...`` keys; see evaluation/behaviour.py).
    from agentic_rl.evaluation.behaviour import behaviour_metrics

    metrics.update(behaviour_metrics(samples))
    return metrics

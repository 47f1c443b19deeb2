"""Collapse and reward-hacking diagnostics: pure functions over one step's trajectories.

They catch the usual ways agentic RL goes wrong before the reward curve shows it:
degenerate repetition (``!!!!!``), every sample giving the same answer, a tool that
keeps failing, tool calls that are mostly malformed, responses that grow step after
step, and entropy that vanishes. The
trainer logs ``step_diagnostics(...)`` next to its other metrics and prints
``check_thresholds(...)`` warnings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agentic_rl.evaluation.metrics import normalize_answer
from agentic_rl.types import INVALID_CALL, Trajectory

__all__ = [
    "DEFAULT_THRESHOLDS",
    "answer_diversity",
    "check_thresholds",
    "first_tokens_after_tool_entropy",
    "malformed_tool_calls",
    "mean_first_tokens_after_tool_entropy",
    "repeated_token_ratio",
    "response_length_trend",
    "step_diagnostics",
    "tool_failure_ratios",
]


def _sampled_runs(trajectory: Trajectory) -> list[list[int]]:
    """The token ids of each maximal run of sampled positions (``loss_mask == 1``)."""
    runs: list[list[int]] = []
    current: list[int] = []
    for token, mask in zip(trajectory.token_ids, trajectory.loss_mask):
        if mask:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def repeated_token_ratio(trajectories: Sequence[Trajectory]) -> float:
    """Fraction of sampled tokens equal to the sampled token right before them.

    Pairs are counted inside each contiguous sampled response only (a response never
    "repeats" the last token of the previous turn across an observation); the
    denominator is the number of such adjacent pairs, so a response that is one token
    repeated scores 1.0. Ordinary text scores a few percent. 0.0 when no response has
    two tokens.
    """
    pairs = repeats = 0
    for trajectory in trajectories:
        for run in _sampled_runs(trajectory):
            pairs += max(len(run) - 1, 0)
            repeats += sum(a == b for a, b in zip(run, run[1:]))
    return repeats / pairs if pairs else 0.0


def answer_diversity(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """How often samples agree on their final answer (compared with ``normalize_answer``).

    - ``identical_answer_ratio``: over groups (``group_id``) of at least two samples,
      the fraction of samples whose answer equals their group's most common non-None
      answer. A sample without an answer never matches. 1.0 means every group answered
      with one voice: expected when the policy is right on every sample, and mode
      collapse otherwise. 0.0 when no group has two samples.
    - ``cross_task_answer_ratio``: the fraction of ALL samples whose answer equals the
      single most common answer of the step; only present when the step spans at least
      two tasks. Different tasks usually have different answers, so a high value means
      the answer no longer depends on the task (a constant answer that games the
      verifier, for example).
    """
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    matched = counted = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        counted += len(members)
        counts = Counter(normalize_answer(t.answer) for t in members if t.answer is not None)
        matched += counts.most_common(1)[0][1] if counts else 0
    out = {"identical_answer_ratio": matched / counted if counted else 0.0}
    if len({t.task_id for t in trajectories}) >= 2:
        counts = Counter(normalize_answer(t.answer) for t in trajectories if t.answer is not None)
        out["cross_task_answer_ratio"] = counts.most_common(1)[0][1] / len(trajectories) if counts else 0.0
    return out


def tool_failure_ratios(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """``tool_failure_ratio/<tool>``: failed calls / calls per tool name, plus the overall
    ``tool_failure_ratio``. A call fails when ``ok`` is false or it was malformed. A call
    the parser could not read (``INVALID_CALL``) names no tool, and one naming a tool that
    does not exist (``unknown_tool``) names the model's invention: both count in the
    overall ratio only (``malformed_tool_calls`` counts them). Empty when no tool was called."""
    failures: list[bool] = []
    calls: dict[str, list[bool]] = {}
    for trajectory in trajectories:
        for result in trajectory.tool_results:
            failures.append(not result.ok or result.malformed)
            if result.name != INVALID_CALL and not result.unknown_tool:
                calls.setdefault(result.name, []).append(failures[-1])
    out: dict[str, float] = {}
    if failures:
        out["tool_failure_ratio"] = sum(failures) / len(failures)
    for name in sorted(calls):
        out[f"tool_failure_ratio/{name}"] = sum(calls[name]) / len(calls[name])
    return out


def malformed_tool_calls(trajectories: Sequence[Trajectory]) -> int:
    """Malformed tool calls (``ToolResult.malformed``): calls the parser could not read,
    calls naming an unknown tool, and calls with bad arguments."""
    return sum(result.malformed for trajectory in trajectories for result in trajectory.tool_results)


def response_length_trend(history: Sequence[float], window: int = 10) -> float:
    """Least-squares slope (tokens per step) of the last ``window`` values of ``history``.

    ``history`` holds the mean response length of consecutive steps, oldest first. A
    steadily positive slope while the reward is flat is the classic sign of length
    hacking or of a run drifting toward truncation. 0.0 with fewer than two values.
    """
    if window < 2:
        raise ValueError(f"response_length_trend needs window >= 2, got {window}")
    values = [float(v) for v in history[-window:]]
    n = len(values)
    if n < 2:
        return 0.0
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    denominator = sum((x - mean_x) ** 2 for x in range(n))
    return numerator / denominator


def _first_sampled_after_tools(trajectory: Trajectory, m: int) -> list[int]:
    """Positions of the first ``m`` sampled tokens after each tool observation."""
    positions: list[int] = []
    mask = trajectory.loss_mask
    for turn in trajectory.turns:
        if not turn.tool_results or turn.observation_end <= turn.response_end:
            continue
        index = turn.observation_end
        # Skip what sits between the observation and the next response (e.g. the
        # assistant header of the chat template, never sampled).
        while index < len(mask) and not mask[index]:
            index += 1
        taken = 0
        while index < len(mask) and mask[index] and taken < m:
            positions.append(index)
            index += 1
            taken += 1
    return positions


def first_tokens_after_tool_entropy(entropies: Sequence[float], trajectory: Trajectory, m: int = 8) -> float | None:
    """Mean entropy of the first ``m`` sampled tokens after each tool observation.

    ``entropies[i]`` is the policy's entropy at position i of ``trajectory.token_ids``
    (any value where ``loss_mask`` is 0). High entropy right after a tool result means
    the policy is uncertain how to use what it got back (ARPO branches rollouts there);
    a value falling to ~0 shows it stopped reading the observation. The mean is over
    tokens, pooled across observations. None when no tool observation is followed by
    a sampled token.

    Raises:
        ValueError: if ``entropies`` is shorter than the sampled positions it needs, or
            ``m < 1``.
    """
    if m < 1:
        raise ValueError(f"first_tokens_after_tool_entropy needs m >= 1, got {m}")
    positions = _first_sampled_after_tools(trajectory, m)
    if not positions:
        return None
    if positions[-1] >= len(entropies):
        raise ValueError(f"entropies has {len(entropies)} values but the trajectory needs position {positions[-1]}")
    return sum(float(entropies[i]) for i in positions) / len(positions)


def mean_first_tokens_after_tool_entropy(
    entropies: Sequence[Sequence[float]], trajectories: Sequence[Trajectory], m: int = 8
) -> float | None:
    """``first_tokens_after_tool_entropy`` pooled over a batch (token mean over all of
    them; ``entropies[j]`` belongs to ``trajectories[j]``). None when no trajectory has
    a sampled token after a tool observation."""
    if len(entropies) != len(trajectories):
        raise ValueError(f"got {len(entropies)} entropy rows for {len(trajectories)} trajectories")
    total, count = 0.0, 0
    for row, trajectory in zip(entropies, trajectories):
        positions = _first_sampled_after_tools(trajectory, m)
        if positions and positions[-1] >= len(row):
            raise ValueError(f"entropies has {len(row)} values but the trajectory needs position {positions[-1]}")
        total += sum(float(row[i]) for i in positions)
        count += len(positions)
    return total / count if count else None


def step_diagnostics(
    trajectories: Sequence[Trajectory],
    *,
    response_length_history: Sequence[float] | None = None,
    window: int = 10,
) -> dict[str, float]:
    """The flat diagnostics dict for one step.

    Keys: ``repeated_token_ratio``, ``identical_answer_ratio``,
    ``cross_task_answer_ratio`` (two tasks or more), ``tool_failure_ratio`` and
    ``tool_failure_ratio/<tool>`` (when tools were called), ``malformed_tool_calls``, and
    ``response_length_trend`` when ``response_length_history`` is given: the slope over
    the last ``window`` values of that history followed by this step's mean sampled
    tokens per episode (the trainer's ``response_length``). Pass the history of
    previous steps only; this step's value is appended here.
    """
    metrics: dict[str, float] = {"repeated_token_ratio": repeated_token_ratio(trajectories)}
    metrics.update(answer_diversity(trajectories))
    metrics.update(tool_failure_ratios(trajectories))
    metrics["malformed_tool_calls"] = float(malformed_tool_calls(trajectories))
    if response_length_history is not None:
        current = sum(t.response_tokens for t in trajectories) / len(trajectories) if trajectories else 0.0
        metrics["response_length_trend"] = response_length_trend([*response_length_history, current], window)
    return metrics


DEFAULT_THRESHOLDS: dict[str, tuple[str, float]] = {
    "entropy": ("<", 0.01),
    "repeated_token_ratio": (">", 0.5),
    "identical_answer_ratio": (">", 0.95),
    "cross_task_answer_ratio": (">", 0.9),
    "frac_zero_std_groups": (">", 0.9),
    "tool_failure_ratio": (">", 0.5),
    "malformed_call_rate": (">", 0.5),
}
"""metric -> (direction, limit). A key also covers ``key/<anything>``: the
``tool_failure_ratio`` entry checks every ``tool_failure_ratio/<tool>``."""

_EXPLAIN = {
    "entropy": "policy entropy has collapsed; sampling is near-deterministic and exploration has stopped",
    "repeated_token_ratio": "responses repeat the same token (degenerate output such as '!!!!')",
    "identical_answer_ratio": "samples within a group give the same answer although accuracy is not high (mode collapse)",
    "cross_task_answer_ratio": "the same answer is given across different tasks (possible reward hacking)",
    "frac_zero_std_groups": "most groups have identical rewards, so GRPO-style advantages are zero and nothing is learned",
    "tool_failure_ratio": "most tool calls fail",
    "malformed_call_rate": "most tool calls are malformed",
}
_MALFORMED = "the parser could not read them, or they named an unknown tool or gave bad arguments"


def _rule(key: str, value: Any, defaults: Mapping[str, tuple[str, float]]) -> tuple[str, float] | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        direction, limit = value
        if direction not in ("<", ">"):
            raise ValueError(f"threshold for {key!r}: direction must be '<' or '>', got {direction!r}")
        return direction, float(limit)
    return defaults.get(key, (">", 0.0))[0], float(value)


def check_thresholds(metrics: Mapping[str, float], thresholds: Mapping[str, Any] | None = None) -> list[str]:
    """Human-readable warnings for every metric past its threshold.

    ``thresholds`` updates ``DEFAULT_THRESHOLDS``: a value is a limit (keeping the
    default direction; ``>`` for new keys), a ``("<" | ">", limit)`` pair, or None to
    turn a check off. Missing or non-finite metrics are not checked. The
    ``identical_answer_ratio`` check is skipped when the step's ``accuracy`` is itself
    above that limit: a group that is all correct is identical by construction.
    """
    rules: dict[str, tuple[str, float]] = {}
    for key, value in {**DEFAULT_THRESHOLDS, **(thresholds or {})}.items():
        rule = _rule(key, value, DEFAULT_THRESHOLDS)
        if rule is not None:
            rules[key] = rule
    warnings: list[str] = []
    for metric_key in sorted(metrics):
        value = metrics[metric_key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        base = metric_key if metric_key in rules else metric_key.split("/", 1)[0]
        if base not in rules or metric_key == f"tool_failure_ratio/{INVALID_CALL}":  # logged by older runs: not a tool
            continue
        direction, limit = rules[base]
        if not (value < limit if direction == "<" else value > limit):
            continue
        if base == "identical_answer_ratio" and metrics.get("accuracy", 0.0) > limit:
            continue
        reason = _EXPLAIN.get(base, "past its threshold")
        if base == "tool_failure_ratio" and metric_key != base:
            reason = f"most calls to {metric_key.split('/', 1)[1]!r} fail"
        if base == "malformed_call_rate":
            count = metrics.get("malformed_tool_calls")
            reason = (
                f"{int(count)} malformed tool calls this step ({_MALFORMED})"
                if isinstance(count, (int, float))
                else f"{reason} ({_MALFORMED})"
            )
        warnings.append(f"{metric_key} = {value:.4g} {direction} {limit:g}: {reason}")
    return warnings

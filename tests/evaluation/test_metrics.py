"""Tests for evaluation metrics against hand-computed values and brute force."""

from __future__ import annotations

import itertools
import math

import pytest

from agentic_rl.evaluation import aggregate_metrics, avg_at_k, maj_at_k, majority_vote, pass_at_k
from agentic_rl.types import TERMINATION_REASONS, ToolResult, Trajectory, Turn


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(outcomes[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - math.comb(3, 2) / math.comb(5, 2)),
        (5, 2, 2, 0.7),
        (10, 3, 5, 1 - 21 / 252),
        (4, 0, 2, 0.0),
        (4, 4, 2, 1.0),
        (5, 4, 2, 1.0),  # n - c < k
        (3, 1, 3, 1.0),
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_brute_force() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k)), (n, c, k)


def test_pass_at_k_large_n_is_stable() -> None:
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    assert 0.0 <= pass_at_k(10_000, 3, 100) <= 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 1, 0), (3, -1, 1), (3, 4, 1)])
def test_pass_at_k_rejects_bad_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_avg_at_k() -> None:
    assert avg_at_k([True, False, True, False]) == 0.5
    assert avg_at_k([False]) == 0.0
    with pytest.raises(ValueError):
        avg_at_k([])


def test_majority_vote_counts_and_ties() -> None:
    assert majority_vote(["a", "b", "b"]) == "b"
    assert majority_vote(["a", "b", "b", "a"]) == "a"  # tie: first seen wins
    assert majority_vote(["b", None, "a", "a", "b"]) == "b"
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None
    assert majority_vote([None, "x"]) == "x"


def test_majority_vote_numeric_normalisation() -> None:
    assert majority_vote(["7", "42.0", " 42 ", "42", "7"]) == "42.0"  # first-seen form
    assert majority_vote([" yes", "yes ", "no"]) == " yes"
    assert majority_vote(["1e3", "1000", "999"]) == "1e3"
    # Non-numeric strings are not case-folded.
    assert majority_vote(["Paris", "paris", "paris"]) == "paris"


def test_maj_at_k() -> None:
    assert maj_at_k(["4", "4.0", "5"], lambda a: a.strip() in {"4", "4.0"}) == 1.0
    assert maj_at_k(["5", "5", "4"], lambda a: a == "4") == 0.0
    assert maj_at_k([None, None], lambda a: True) == 0.0


def make_trajectory(
    *,
    correct: bool,
    answer: str | None,
    reward: float,
    reason: str,
    response_tokens: int,
    turns: list[list[ToolResult]],
    infra_error: str | None = None,
) -> Trajectory:
    trajectory = Trajectory(
        task_id="t",
        group_id="g",
        reward=reward,
        termination_reason=reason,
        answer=answer,
        correct=correct,
        infra_error=infra_error,
    )
    trajectory.append([1, 2], mask=0)
    trajectory.append(list(range(response_tokens)), mask=1)
    trajectory.turns = [Turn(assistant_text="", tool_results=results) for results in turns]
    return trajectory


def search(ok: bool = True, latency_s: float = 0.1) -> ToolResult:
    return ToolResult(name="search", content="", ok=ok, latency_s=latency_s)


def python(ok: bool = True, latency_s: float = 0.2, malformed: bool = False) -> ToolResult:
    return ToolResult(name="python", content="", ok=ok, latency_s=latency_s, malformed=malformed)


def test_aggregate_metrics_exact_values() -> None:
    # Task A: 3 samples, answers 42 / 42.0 / 7, only the first correct.
    task_a = [
        make_trajectory(
            correct=True,
            answer="42",
            reward=1.0,
            reason="answered",
            response_tokens=10,
            turns=[[search(latency_s=0.1)], []],
        ),
        make_trajectory(
            correct=False,
            answer="42.0",
            reward=0.0,
            reason="answered",
            response_tokens=20,
            turns=[[search(ok=False, latency_s=0.3), python(latency_s=0.2)]],
        ),
        make_trajectory(
            correct=False,
            answer="7",
            reward=0.5,
            reason="max_turns",
            response_tokens=30,
            turns=[[python(ok=False, malformed=True, latency_s=0.0)], [], []],
        ),
    ]
    # Task B: 3 samples; majority of the first 2 is "x" (wrong); third is correct "y".
    task_b = [
        make_trajectory(correct=False, answer="x", reward=0.0, reason="max_tokens", response_tokens=5, turns=[[]]),
        make_trajectory(
            correct=False,
            answer="x",
            reward=0.0,
            reason="error",
            response_tokens=0,
            turns=[],
            infra_error="sandbox crashed",
        ),
        make_trajectory(correct=True, answer="y", reward=1.0, reason="answered", response_tokens=15, turns=[[], []]),
    ]
    task_a[0].info["template_drift_tokens"] = 4  # an episode's total over its segments
    task_b[2].info["template_drift_tokens"] = 8
    metrics = aggregate_metrics([task_a, task_b], k=2)

    expected = {
        "avg@2": (1 / 3 + 1 / 3) / 2,
        "pass@2": (pass_at_k(3, 1, 2) + pass_at_k(3, 1, 2)) / 2,  # = 2/3 each
        "maj@2": (1.0 + 0.0) / 2,  # A: "42"≡"42.0" is correct's answer; B: "x" wrong
        "mean_reward": 2.5 / 6,
        "mean_turns": (2 + 1 + 3 + 1 + 0 + 2) / 6,
        "mean_response_tokens": (10 + 20 + 30 + 5 + 0 + 15) / 6,
        "mean_segments": 1.0,
        "mean_summaries": 0.0,
        "template_drift_tokens": (4 + 8) / 6,  # per episode, as the training step metric
        "num_tasks": 2.0,
        "num_samples": 6.0,
        "infra_error_rate": 1 / 6,
        "num_tool_calls": 4.0,
        "tool_calls_per_episode": 4 / 6,
        "tool_success_rate": 2 / 4,
        "malformed_call_rate": 1 / 4,
        "episodes_with_tool_call": 3 / 6,
        "correct_with_tool_call": 1 / 2,  # A's correct used a tool; B's correct did not
        "termination/answered": 3 / 6,
        "termination/max_turns": 1 / 6,
        "termination/max_tokens": 1 / 6,
        "termination/timeout": 0.0,
        "termination/error": 1 / 6,
        "tool/search/calls": 2.0,
        "tool/search/success_rate": 0.5,
        "tool/search/latency_ms_mean": 200.0,
        "tool/python/calls": 2.0,
        "tool/python/success_rate": 0.5,
        "tool/python/latency_ms_mean": 100.0,
    }
    assert expected["pass@2"] == pytest.approx(2 / 3)
    assert {key for key in metrics if not key.startswith("behaviour/")} == set(expected)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value), key
    assert all(isinstance(v, float) for v in metrics.values())
    assert {f"termination/{r}" for r in TERMINATION_REASONS} <= set(metrics)


def test_aggregate_metrics_without_tool_calls_or_correct_samples() -> None:
    group = [
        make_trajectory(correct=False, answer=None, reward=0.0, reason="timeout", response_tokens=3, turns=[[]])
        for _ in range(2)
    ]
    metrics = aggregate_metrics([group], k=1)
    assert metrics["num_tool_calls"] == 0.0
    assert metrics["tool_success_rate"] == 0.0
    assert metrics["malformed_call_rate"] == 0.0
    assert metrics["correct_with_tool_call"] == 0.0
    assert metrics["maj@1"] == 0.0
    assert metrics["pass@1"] == 0.0
    assert metrics["termination/timeout"] == 1.0
    assert metrics["template_drift_tokens"] == 0.0
    assert not any(key.startswith("tool/") for key in metrics)


def test_aggregate_metrics_maj_uses_first_k_only() -> None:
    def traj(answer: str, correct: bool) -> Trajectory:
        return make_trajectory(
            correct=correct, answer=answer, reward=0.0, reason="answered", response_tokens=1, turns=[]
        )

    group = [traj("b", False), traj("a", True), traj("a", True)]
    assert aggregate_metrics([group], k=1)["maj@1"] == 0.0  # only "b" votes
    assert aggregate_metrics([group], k=3)["maj@3"] == 1.0


def test_aggregate_metrics_validates() -> None:
    group = [make_trajectory(correct=True, answer="1", reward=1.0, reason="answered", response_tokens=1, turns=[])]
    with pytest.raises(ValueError):
        aggregate_metrics([group], k=2)
    with pytest.raises(ValueError):
        aggregate_metrics([], k=1)
    with pytest.raises(ValueError):
        aggregate_metrics([group], k=0)

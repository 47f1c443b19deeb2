"""Reactive vs deliberative behaviour analysis with hand-built trajectories."""

from __future__ import annotations

import pytest

from agentic_rl.evaluation.behaviour import behaviour_metrics, classify
from agentic_rl.evaluation.metrics import aggregate_metrics
from agentic_rl.types import ToolResult, Trajectory, Turn


def make(sampled: int, calls: list[bool], *, correct: bool, malformed: bool = False) -> Trajectory:
    t = Trajectory(task_id="t", group_id="g", correct=correct)
    t.append([1, 2], 0)
    t.append([3] * sampled, 1)
    results = [ToolResult(name="calc", content="", ok=ok, malformed=malformed and not ok) for ok in calls]
    t.turns = [Turn(assistant_text="", tool_results=results)]
    return t


def test_classify_by_sampled_tokens_per_call() -> None:
    assert classify(make(40, [True, True], correct=True)) == "reactive"  # 20 per call
    assert classify(make(300, [True], correct=True)) == "deliberative"  # 300 per call
    assert classify(make(100, [True], correct=True)) == "reactive"  # threshold is inclusive
    assert classify(make(100, [True], correct=True), tokens_per_call_threshold=99) == "deliberative"
    assert classify(make(50, [], correct=False)) == "no_tool"
    # Works on the to_dict() form stored in eval JSONs and rollouts.jsonl.
    assert classify(make(300, [True], correct=True).to_dict()) == "deliberative"


def test_behaviour_metrics_fractions_accuracy_and_tool_success() -> None:
    episodes = [
        make(40, [True, False], correct=True),  # reactive, 1/2 calls ok
        make(30, [True, True, True], correct=False),  # reactive, 3/3 ok
        make(500, [True, False], correct=True, malformed=True),  # deliberative (250/call), 1/2 ok
        make(50, [], correct=False),  # no_tool
        make(70, [], correct=True),  # no_tool
    ]
    out = behaviour_metrics(episodes)
    expected = {
        "behaviour/reactive/fraction": 2 / 5,
        "behaviour/reactive/accuracy": 1 / 2,
        "behaviour/reactive/tool_success_rate": 4 / 5,
        "behaviour/deliberative/fraction": 1 / 5,
        "behaviour/deliberative/accuracy": 1.0,
        "behaviour/deliberative/tool_success_rate": 1 / 2,
        "behaviour/no_tool/fraction": 2 / 5,
        "behaviour/no_tool/accuracy": 1 / 2,
        "behaviour/tokens_per_call_mean": (20 + 10 + 250) / 3,
        "behaviour/tokens_per_call_threshold": 100.0,
    }
    assert set(out) == set(expected)
    for key, value in expected.items():
        assert out[key] == pytest.approx(value), key
    # Same numbers from the serialised form.
    assert behaviour_metrics([e.to_dict() for e in episodes]) == pytest.approx(out)
    assert behaviour_metrics([]) == {}


def test_aggregate_metrics_includes_behaviour_keys() -> None:
    group = [make(40, [True], correct=True), make(400, [True], correct=False)]
    metrics = aggregate_metrics([group], k=1)
    assert metrics["behaviour/reactive/fraction"] == 0.5
    assert metrics["behaviour/deliberative/accuracy"] == 0.0
    assert metrics["behaviour/no_tool/fraction"] == 0.0

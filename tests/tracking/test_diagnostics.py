"""Collapse / hacking diagnostics against hand-computed numbers."""

from __future__ import annotations

import pytest

from agentic_rl.tracking.diagnostics import (
    answer_diversity,
    check_thresholds,
    first_tokens_after_tool_entropy,
    mean_first_tokens_after_tool_entropy,
    repeated_token_ratio,
    response_length_trend,
    step_diagnostics,
    tool_failure_ratios,
)
from agentic_rl.types import INVALID_CALL, ToolResult, Trajectory, Turn


def episode(spans, *, group="g", task="t", answer=None, tools=()) -> Trajectory:
    """Build a trajectory from ``[(token_ids, mask), ...]`` spans; ``tools`` gives, per
    turn, the ToolResults; turns are derived from the sampled spans (each sampled span
    is a response, the masked span right after it its observation)."""
    t = Trajectory(task_id=task, group_id=group, answer=answer)
    pending: Turn | None = None
    for tokens, mask in spans:
        start = len(t.token_ids)
        t.append(list(tokens), mask)
        if mask:
            pending = Turn(
                assistant_text="", response_start=start, response_end=len(t.token_ids), observation_end=len(t.token_ids)
            )
            t.turns.append(pending)
        elif pending is not None:
            pending.observation_end = len(t.token_ids)
            pending = None
    for turn, results in zip(t.turns, tools):
        turn.tool_results = list(results)
    return t


def ok(name="calc"):
    return ToolResult(name=name, content="1")


def fail(name="calc", malformed=False):
    return ToolResult(name=name, content="Error", ok=False, malformed=malformed)


def test_repeated_token_ratio_counts_pairs_inside_responses_only() -> None:
    # Response 1: 5 5 5 6 -> pairs (5,5) (5,5) (5,6): 2 repeats of 3.
    # Observation 6 6 is not sampled; response 2 starts with 6, which must NOT count as
    # a repeat of response 1's last 6. Response 2: 6 7 -> 1 pair, 0 repeats.
    a = episode([([1, 2], 0), ([5, 5, 5, 6], 1), ([6, 6], 0), ([6, 7], 1)])
    # "!!!!" collapse: 4 identical tokens -> 3 of 3 pairs.
    b = episode([([1], 0), ([0, 0, 0, 0], 1)])
    assert repeated_token_ratio([a]) == pytest.approx(2 / 4)
    assert repeated_token_ratio([b]) == 1.0
    assert repeated_token_ratio([a, b]) == pytest.approx(5 / 7)
    assert repeated_token_ratio([episode([([1, 2], 0), ([3], 1)])]) == 0.0  # no pairs


def test_answer_diversity_within_groups_and_across_tasks() -> None:
    trajectories = [
        # group A (task 1): "42", "42.0", "7", None -> mode "42" x2 of 4
        episode([], group="A", task="1", answer="42"),
        episode([], group="A", task="1", answer="42.0"),
        episode([], group="A", task="1", answer="7"),
        episode([], group="A", task="1", answer=None),
        # group B (task 2): all "7" -> 2 of 2
        episode([], group="B", task="2", answer="7"),
        episode([], group="B", task="2", answer="7"),
        # group C has one sample: left out of identical_answer_ratio
        episode([], group="C", task="3", answer="7"),
    ]
    out = answer_diversity(trajectories)
    assert out["identical_answer_ratio"] == pytest.approx((2 + 2) / 6)
    # Across all 7 samples the most common answer is "7" (4 times).
    assert out["cross_task_answer_ratio"] == pytest.approx(4 / 7)
    one_task = answer_diversity([episode([], group="A", task="1", answer=None)] * 2)
    assert one_task == {"identical_answer_ratio": 0.0}


def test_tool_failure_ratio_per_tool_and_overall() -> None:
    trajectories = [
        episode([([1], 1), ([2], 0), ([3], 1)], tools=[[ok("calc"), fail("search")], []]),
        episode([([1], 1), ([2], 0)], tools=[[fail("calc", malformed=True), fail("search"), ok("search")]]),
    ]
    out = tool_failure_ratios(trajectories)
    assert out == {
        "tool_failure_ratio": pytest.approx(3 / 5),
        "tool_failure_ratio/calc": pytest.approx(1 / 2),
        "tool_failure_ratio/search": pytest.approx(2 / 3),
    }
    assert tool_failure_ratios([episode([([1], 1)])]) == {}


def test_response_length_trend_is_least_squares_slope_over_window() -> None:
    assert response_length_trend([10, 12, 14, 16]) == pytest.approx(2.0)
    # Only the last 3 values: 30, 20, 10 -> slope -10.
    assert response_length_trend([0, 100, 30, 20, 10], window=3) == pytest.approx(-10.0)
    # 1, 3, 2: x mean 1, y mean 2 -> ((-1)(-1) + 0 + (1)(0)) / 2 = 0.5
    assert response_length_trend([1, 3, 2]) == pytest.approx(0.5)
    assert response_length_trend([5]) == 0.0
    with pytest.raises(ValueError):
        response_length_trend([1, 2], window=1)


def test_first_tokens_after_tool_entropy() -> None:
    # prompt(2) | resp 3 (call) | obs 2 + header 1 | resp 4 (call) | obs 1 | resp 2
    t = episode(
        [([1, 1], 0), ([2, 2, 2], 1), ([3, 3, 3], 0), ([4, 4, 4, 4], 1), ([5], 0), ([6, 6], 1)],
        tools=[[ok()], [ok()], []],
    )
    entropies = [float(i) for i in range(len(t.token_ids))]  # entropy = position
    # Positions: resp2 = 8..11, resp3 = 13..14. m=2 -> 8, 9, 13, 14.
    assert first_tokens_after_tool_entropy(entropies, t, m=2) == pytest.approx((8 + 9 + 13 + 14) / 4)
    # m larger than the response: resp2 gives 4 tokens, resp3 2.
    assert first_tokens_after_tool_entropy(entropies, t, m=10) == pytest.approx((8 + 9 + 10 + 11 + 13 + 14) / 6)
    # A turn without tool results does not count as a tool observation.
    t.turns[1].tool_results = []
    assert first_tokens_after_tool_entropy(entropies, t, m=2) == pytest.approx((8 + 9) / 2)
    no_tools = episode([([1], 0), ([2, 2], 1)])
    assert first_tokens_after_tool_entropy([0.0, 1.0, 1.0], no_tools) is None
    # Pooled over a batch: token mean.
    other = episode([([1], 0), ([2], 1), ([3], 0), ([4, 4], 1)], tools=[[ok()]])
    pooled = mean_first_tokens_after_tool_entropy([entropies, [0.0, 0.0, 0.0, 1.0, 3.0]], [t, other], m=2)
    assert pooled == pytest.approx((8 + 9 + 1 + 3) / 4)
    with pytest.raises(ValueError):
        first_tokens_after_tool_entropy([0.0] * 5, t, m=2)


def test_step_diagnostics_flat_dict() -> None:
    trajectories = [
        episode([([1], 0), ([9, 9, 9, 9], 1)], group="A", task="1", answer="1"),
        episode([([1], 0), ([9, 8], 1)], group="A", task="1", answer="1", tools=[[fail("calc")]]),
    ]
    out = step_diagnostics(trajectories, response_length_history=[1.0, 2.0])
    assert out["repeated_token_ratio"] == pytest.approx(3 / 4)
    assert out["identical_answer_ratio"] == 1.0
    assert out["tool_failure_ratio/calc"] == 1.0
    # history 1, 2 plus this step's mean sampled tokens (4 + 2) / 2 = 3 -> slope 1.
    assert out["response_length_trend"] == pytest.approx(1.0)
    assert "cross_task_answer_ratio" not in out
    assert "response_length_trend" not in step_diagnostics(trajectories)


def test_unreadable_calls_warn_as_malformed_calls_not_as_a_tool() -> None:
    from agentic_rl.evaluation.metrics import aggregate_metrics

    unreadable = ToolResult(name=INVALID_CALL, content="Error: invalid JSON", ok=False, malformed=True)
    trajectories = [
        episode([([1], 0), ([2], 1), ([3], 0), ([4], 1)], group="A", tools=[[unreadable, unreadable], [ok("calc")]]),
        episode([([1], 0), ([2], 1)], group="A", tools=[[unreadable]]),
    ]
    out = step_diagnostics(trajectories)
    assert out["malformed_tool_calls"] == 3
    assert out["tool_failure_ratio"] == pytest.approx(3 / 4)  # unreadable calls still fail
    assert not any(key.endswith(INVALID_CALL) for key in out)  # but name no tool
    assert out["tool_failure_ratio/calc"] == 0.0
    # The step's metrics as the trainer logs them (malformed_call_rate comes from aggregate_metrics).
    metrics = {**out, "malformed_call_rate": aggregate_metrics([trajectories], k=1)["malformed_call_rate"]}
    warnings = check_thresholds(metrics)
    assert any(w.startswith("malformed_call_rate = 0.75 > 0.5: 3 malformed tool calls this step") for w in warnings), (
        warnings
    )
    assert not any(INVALID_CALL in w for w in warnings)
    # Metrics logged by older runs still name invalid_call as a tool: never warned about as one.
    assert check_thresholds({f"tool_failure_ratio/{INVALID_CALL}": 1.0}) == []
    assert check_thresholds({"malformed_call_rate": 0.2, "malformed_tool_calls": 1.0}) == []


def test_invented_tool_names_make_no_metric_series_of_their_own() -> None:
    """A call naming a tool that does not exist (the demo model copies ``<tool name>`` from
    its prompt) counts as malformed under one label, never as a tool named by the model."""
    from agentic_rl.evaluation.metrics import aggregate_metrics
    from agentic_rl.tools import ToolRegistry, calculator
    from agentic_rl.types import UNKNOWN_TOOL, ToolCall

    registry = ToolRegistry([calculator])
    invented = [registry.invoke(ToolCall(name=name, arguments={})) for name in ("<tool name>", "calc", "python")]
    ran = registry.invoke(ToolCall(name="calculator", arguments={"expression": "2+3"}))
    trajectories = [episode([([1], 0), ([2], 1), ([3], 0), ([4], 1)], group="A", tools=[invented, [ran]])]
    out = step_diagnostics(trajectories)
    assert {key for key in out if key.startswith("tool_failure_ratio")} == {
        "tool_failure_ratio",
        "tool_failure_ratio/calculator",
    }
    assert out["tool_failure_ratio"] == pytest.approx(3 / 4) and out["tool_failure_ratio/calculator"] == 0.0
    assert out["malformed_tool_calls"] == 3
    metrics = aggregate_metrics([trajectories], k=1)
    assert metrics[f"tool/{UNKNOWN_TOOL}/calls"] == 3.0 and metrics[f"tool/{UNKNOWN_TOOL}/success_rate"] == 0.0
    assert metrics["tool/calculator/calls"] == 1.0
    assert not any("<tool name>" in key or "tool/python/" in key for key in {**out, **metrics})
    assert not any(
        "<tool name>" in w for w in check_thresholds({**out, "malformed_call_rate": metrics["malformed_call_rate"]})
    )


def test_check_thresholds_defaults_and_overrides() -> None:
    healthy = {
        "entropy": 0.3,
        "repeated_token_ratio": 0.02,
        "identical_answer_ratio": 0.5,
        "frac_zero_std_groups": 0.2,
        "tool_failure_ratio/calc": 0.1,
    }
    assert check_thresholds(healthy) == []
    sick = {
        "entropy": 0.001,
        "repeated_token_ratio": 0.8,
        "identical_answer_ratio": 1.0,
        "accuracy": 0.1,
        "frac_zero_std_groups": 0.95,
        "tool_failure_ratio/search": 0.75,
        "tool_failure_ratio": 0.6,
    }
    warnings = check_thresholds(sick)
    assert len(warnings) == 6
    text = "\n".join(warnings)
    assert "entropy = 0.001 < 0.01" in text
    assert "repeated_token_ratio = 0.8 > 0.5" in text
    assert "most calls to 'search' fail" in text
    assert all("\n" not in w for w in warnings)
    # All groups identical while nearly everything is correct is expected, not collapse.
    assert not any(w.startswith("identical_answer_ratio") for w in check_thresholds({**sick, "accuracy": 0.99}))
    # Overrides: a bare limit keeps the direction, a pair sets both, None disables.
    custom = check_thresholds(
        {"entropy": 0.05, "repeated_token_ratio": 0.8, "kl": 0.3},
        {"entropy": 0.1, "repeated_token_ratio": None, "kl": (">", 0.2)},
    )
    assert [w.split(" ")[0] for w in custom] == ["entropy", "kl"]
    # Missing / NaN metrics are not checked.
    assert check_thresholds({"entropy": float("nan")}) == []
    with pytest.raises(ValueError):
        check_thresholds({}, {"entropy": ("<=", 0.1)})

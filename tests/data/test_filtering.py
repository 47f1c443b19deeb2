"""The pure pass-rate band selection behind difficulty filtering."""

from __future__ import annotations

from agentic_rl.data.filtering import select_by_pass_rate


def test_band_keeps_tasks_strictly_inside_and_reports_histogram() -> None:
    result = select_by_pass_rate({3: 1.0, 1: 0.5, 2: 0.0, 0: 0.25})
    assert result.kept == [1, 0]
    assert result.histogram == {"0.00": 1, "0.25": 1, "0.50": 1, "1.00": 1}
    assert result.to_dict()["pass_rates"] == {"3": 1.0, "1": 0.5, "2": 0.0, "0": 0.25}
    assert select_by_pass_rate({0: 1.0, 1: 0.0}, min_pass_rate=-0.1, max_pass_rate=1.0).kept == [1]


def test_middle_difficulty_weights_hand_values() -> None:
    import pytest

    from agentic_rl.data.filtering import middle_difficulty_weights

    weights = middle_difficulty_weights({"a": 0.5, "b": 0.0, "c": 1.0, "d": 0.9, "e": 0.25}, floor=0.05)
    assert weights == pytest.approx({"a": 0.25, "b": 0.05, "c": 0.05, "d": 0.09, "e": 0.1875})
    assert middle_difficulty_weights({0: 0.99}, floor=0.001)[0] == pytest.approx(0.0099)
    with pytest.raises(ValueError, match="pass rate of 'x'"):
        middle_difficulty_weights({"x": 1.5}, floor=0.01)
    with pytest.raises(ValueError, match="floor"):
        middle_difficulty_weights({"x": 0.5}, floor=0.0)

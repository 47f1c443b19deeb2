"""The pure pass-rate band selection behind difficulty filtering."""

from __future__ import annotations

from agentic_rl.data.filtering import select_by_pass_rate


def test_band_keeps_tasks_strictly_inside_and_reports_histogram() -> None:
    result = select_by_pass_rate({3: 1.0, 1: 0.5, 2: 0.0, 0: 0.25})
    assert result.kept == [1, 0]
    assert result.histogram == {"0.00": 1, "0.25": 1, "0.50": 1, "1.00": 1}
    assert result.to_dict()["pass_rates"] == {"3": 1.0, "1": 0.5, "2": 0.0, "0": 0.25}
    assert select_by_pass_rate({0: 1.0, 1: 0.0}, min_pass_rate=-0.1, max_pass_rate=1.0).kept == [1]

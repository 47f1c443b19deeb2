"""Redirected to a file (a cluster log): progress is a few plain lines with an ETA, never a
bar redrawn with carriage returns, and no line is wrapped at 80 columns."""

from __future__ import annotations

import pytest

from agentic_rl.tracking import display


@pytest.fixture(autouse=True)
def redirected():
    if display.console.is_terminal:
        pytest.skip("stderr is a terminal here")


def test_progress_is_a_plain_line_every_quarter_with_an_eta(capsys) -> None:
    with display.progress(10, "sft") as advance:
        for step in range(10):
            advance(f"loss {1 / (step + 1):.3f}")
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "\r" not in err and len(lines) == 4  # items 3, 6, 9 and the last
    assert lines[0].startswith("sft 3/10 loss 0.333 elapsed ") and " eta " in lines[0]
    assert lines[-1].startswith("sft 10/10 ") and lines[-1].endswith("eta 0:00")


def test_a_long_metric_line_is_not_wrapped(capsys) -> None:
    metrics = {"step": 0.0, "reward_mean": 0.5, "entropy": 0.25, "step_time_s": 12.0}
    metrics.update({key: 0.123456 for key, _ in display._STEP_KEYS if key not in metrics})
    display.print_step(metrics, 8, display.StepClock(8))
    [line] = capsys.readouterr().err.splitlines()
    assert len(line) > 80 and line.startswith("step 1/8") and line.endswith("eta 1:24")


def test_clock() -> None:
    assert display.clock(59.6) == "1:00" and display.clock(3725) == "1:02:05"


def test_training_steps_show_their_loss_and_a_step_rollouts_stay_quiet(capsys) -> None:
    """SFT/DPO feed their step records (a loss), rollouts their trajectories; the rollouts
    inside one RL step are transient: redirected they print nothing (the step line follows)."""
    from agentic_rl.types import Trajectory

    with display.trajectory_progress(2, "SFT") as on_finish:
        on_finish({"step": 1, "loss": 0.75})
        on_finish({"step": 2, "loss": 0.5})
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("SFT 1/2 loss 0.750") and lines[-1].startswith("SFT 2/2 loss 0.500")
    with display.trajectory_progress(2, "rollouts", transient=True) as on_finish:
        on_finish(Trajectory(task_id="t", group_id="g", reward=1.0, correct=True))
    assert capsys.readouterr().err == ""

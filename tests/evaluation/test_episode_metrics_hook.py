"""The generic env metrics hook: envs' ``episode_metrics`` -> trajectory.info -> aggregate_metrics."""

from agentic_rl.evaluation.metrics import aggregate_metrics, episode_metrics_means
from agentic_rl.rollout.engine import _Active, _record_episode_metrics
from agentic_rl.types import Trajectory


def test_means_over_samples_that_report_each_name():
    a = Trajectory("t", "g", info={"episode_metrics": {"x": 1.0, "y": 2.0}})
    b = Trajectory("t", "g", info={"episode_metrics": {"x": 3.0}})
    c = Trajectory("t", "g")
    assert episode_metrics_means([a, b, c]) == {"x": 2.0, "y": 2.0}
    metrics = aggregate_metrics([[a, b, c]], k=1)
    assert metrics["x"] == 2.0 and metrics["y"] == 2.0


class _Env:
    def __init__(self, fn):
        self.episode_metrics = fn


def test_engine_records_hook_and_survives_its_failure():
    state = _Active(Trajectory("t", "g"), _Env(lambda trajectory: {"n": 3}), 0.0)
    _record_episode_metrics(state)
    assert state.trajectory.info["episode_metrics"] == {"n": 3.0}
    state = _Active(Trajectory("t", "g"), _Env(lambda trajectory: 1 / 0), 0.0)
    _record_episode_metrics(state)
    assert "ZeroDivisionError" in state.trajectory.info["episode_metrics_error"]
    state = _Active(Trajectory("t", "g"), None, 0.0)  # envs without the hook (or none at all)
    _record_episode_metrics(state)
    assert "episode_metrics" not in state.trajectory.info

"""The generic env metrics hook: envs' ``episode_metrics`` -> trajectory.info -> aggregate_metrics."""

from agentic_rl.config import RolloutConfig
from agentic_rl.evaluation.metrics import aggregate_metrics, episode_metrics_means
from agentic_rl.rollout.episode import Episode
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


def _finished(env) -> Trajectory:
    episode = Episode(Trajectory("t", "g"), env, RolloutConfig(), renderer=None)
    episode.finish("answered")
    return episode.trajectory


def test_engine_records_hook_and_survives_its_failure():
    assert _finished(_Env(lambda trajectory: {"n": 3})).info["episode_metrics"] == {"n": 3.0}
    assert "ZeroDivisionError" in _finished(_Env(lambda trajectory: 1 / 0)).info["episode_metrics_error"]
    assert "episode_metrics" not in _finished(None).info  # envs without the hook (or none at all)

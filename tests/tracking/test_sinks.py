"""Metric sinks: TensorBoard event files read back, JSONL rows, make_sinks errors."""

from __future__ import annotations

import json
import sys
import time
import types

import pytest

from agentic_rl.config import sinks as config_sinks
from agentic_rl.tracking import sinks as sinks_module
from agentic_rl.tracking.sinks import JsonlSink, MetricSink, MultiSink, TensorBoardSink, make_sinks

pytest.importorskip("tensorboard", reason="tensorboard is not installed")


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_tensorboard_sink_writes_readable_scalars(tmp_path) -> None:
    sink = TensorBoardSink(tmp_path / "tensorboard")
    sink.log(
        {"reward_mean": 0.25, "tool/calculator/success_rate": 0.5, "step": 0, "note": "text", "bad": float("nan")},
        step=0,
    )
    sink.log({"reward_mean": 0.75, "tool/calculator/success_rate": 1.0, "step": 1}, step=1)
    # Flushed every step: readable before close().
    scalars = _scalars(tmp_path / "tensorboard")
    assert scalars["reward_mean"] == [(0, pytest.approx(0.25)), (1, pytest.approx(0.75))]
    assert scalars["tool/calculator/success_rate"] == [(0, pytest.approx(0.5)), (1, pytest.approx(1.0))]
    assert "step" not in scalars and "note" not in scalars and "bad" not in scalars
    sink.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_make_sinks_builds_jsonl_and_tensorboard_in_run_dir(tmp_path) -> None:
    built = make_sinks(tmp_path, ["jsonl", "TensorBoard", "jsonl"])
    assert [type(s) for s in built] == [JsonlSink, TensorBoardSink]
    assert all(isinstance(s, MetricSink) for s in built)
    with MultiSink(built) as sink:
        for step in range(3):
            sink.log({"accuracy": step / 2, "step": step}, step)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"accuracy": 0.0, "step": 0}, {"accuracy": 0.5, "step": 1}, {"accuracy": 1.0, "step": 2}]
    assert [v for _, v in _scalars(tmp_path / "tensorboard")["accuracy"]] == pytest.approx([0.0, 0.5, 1.0])


def test_jsonl_sink_adds_step_when_missing(tmp_path) -> None:
    sink = JsonlSink(tmp_path / "m.jsonl")
    sink.log({"loss": 1.5}, step=7)
    sink.close()
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"loss": 1.5, "step": 7}


def test_make_sinks_unknown_name_is_one_line_error(tmp_path) -> None:
    with pytest.raises(
        ValueError, match=r"unknown metric sink 'tensorbored'; choose from jsonl, tensorboard, wandb, mlflow"
    ) as info:
        make_sinks(tmp_path / "run", ["jsonl", "tensorbored"])
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()  # validated before anything is created


def test_make_sinks_missing_package_is_one_line_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(config_sinks, "package_installed", lambda package: package != "wandb")
    with pytest.raises(ValueError, match=r"metric sink 'wandb' needs the wandb package.*pip install wandb"):
        make_sinks(tmp_path, ["wandb"])


def test_wandb_sink_offline_by_default(tmp_path, monkeypatch) -> None:
    calls: dict = {"log": []}

    class FakeRun:
        def log(self, data, step):
            calls["log"].append((data, step))

        def finish(self):
            calls["finished"] = True

    def init(**kwargs):
        calls["init"] = kwargs
        return FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    sink = sinks_module.WandbSink(tmp_path / "run-a")
    sink.log({"reward_mean": 1.0, "step": 3, "name": "x"}, step=3)
    sink.close()
    assert calls["init"]["mode"] == "offline" and calls["init"]["name"] == "run-a"
    assert calls["init"]["dir"] == str(tmp_path / "run-a")
    assert calls["log"] == [({"reward_mean": 1.0}, 3)] and calls["finished"]


def test_mlflow_sink_uses_file_store_in_run_dir_and_sanitises_names(tmp_path, monkeypatch) -> None:
    logged = []

    class FakeClient:
        def __init__(self, tracking_uri):
            logged.append(("uri", tracking_uri))

        def get_experiment_by_name(self, name):
            return None

        def create_experiment(self, name):
            return "1"

        def create_run(self, experiment_id, run_name):
            return types.SimpleNamespace(info=types.SimpleNamespace(run_id="r1"))

        def log_metric(self, run_id, key, value, step):
            logged.append((key, value, step))

        def set_terminated(self, run_id):
            logged.append(("terminated", run_id))

    tracking = types.ModuleType("mlflow.tracking")
    tracking.MlflowClient = FakeClient
    monkeypatch.setitem(sys.modules, "mlflow", types.ModuleType("mlflow"))
    monkeypatch.setitem(sys.modules, "mlflow.tracking", tracking)
    sink = sinks_module.MlflowSink(tmp_path)
    sink.log({"avg@4": 0.5, "tool/calc/success_rate": 1.0}, step=2)
    sink.close()
    assert logged[0] == ("uri", (tmp_path / "mlruns").resolve().as_uri())
    assert ("avg_4", 0.5, 2) in logged and ("tool/calc/success_rate", 1.0, 2) in logged
    assert logged[-1] == ("terminated", "r1")


def test_multisink_drops_a_failing_optional_sink_with_a_warning(tmp_path) -> None:
    class Broken:
        def log(self, metrics, step):
            raise ConnectionError("offline")

        def close(self):
            pass

    messages: list[str] = []
    jsonl = JsonlSink(tmp_path / "metrics.jsonl")
    sink = MultiSink([jsonl, Broken()], on_error=messages.append)
    sink.log({"a": 1.0}, 0)
    sink.log({"a": 2.0}, 1)
    sink.close()
    assert len(messages) == 1 and "Broken" in messages[0] and "offline" in messages[0]
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_tensorboard_resume_purges_steps_logged_after_the_checkpoint(tmp_path) -> None:
    first = make_sinks(tmp_path, ["tensorboard"])[0]
    for step in range(4):
        first.log({"loss": float(step)}, step)
    first.close()  # "crash" after step 3; the checkpoint was at step 2
    # A resumed run starts in a later second (a new process), so its event file sorts after
    # the crashed one's. Within one second the process's writer counter decides, compared
    # as text ("10" sorts before "9"): the order then depends on how many writers came first.
    time.sleep(1.0 - time.time() % 1.0 + 0.01)
    resumed = make_sinks(tmp_path, ["tensorboard"], start_step=2)[0]
    for step in (2, 3):
        resumed.log({"loss": 10.0 + step}, step)
    resumed.close()
    assert _scalars(tmp_path / "tensorboard")["loss"] == [(0, 0.0), (1, 1.0), (2, 12.0), (3, 13.0)]

"""`agentic-rl train` with Ray rollout workers, end to end: the driver SIGKILLed mid-run
resumes from its last checkpoint to the same weights and metrics as a straight run (sync
mode is deterministic), and an async run reports its staleness metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

pytest.importorskip("ray")

from agentic_rl.training.checkpoint import COMPLETE  # noqa: E402
from agentic_rl.training.rl_metrics import MACHINE_METRICS  # noqa: E402

STEPS = 3


def _recipe(path: Path, **distributed) -> Path:
    recipe = {
        "description": "ray test",
        "model": {"name": "tiny-random", "device": "cpu"},
        "precision": "fp32",
        "env": {"name": "arithmetic", "max_turns": 2},
        "rollout": {"max_new_tokens": 8, "max_total_tokens": 512},
        "eval": {"num_tasks": 2},
        "optim": {"lr": 1e-3},
        "rl": {"steps": STEPS, "tasks_per_step": 2, "group_size": 2},
        "checkpoint_every": 1,
        "distributed": {"engine": "ray", "rollout_workers": 1, **distributed},
    }
    path.write_text(yaml.safe_dump(recipe))
    return path


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)  # each run starts its own one-machine cluster
    return subprocess.Popen(
        [sys.executable, "-m", "agentic_rl", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait(process: subprocess.Popen, timeout: float = 300) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output.decode()[-3000:]
    return output.decode()


def _metrics(run: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k not in MACHINE_METRICS}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.mark.slow
def test_driver_killed_then_resumed_matches_a_straight_run(tmp_path) -> None:
    recipe = _recipe(tmp_path / "recipe.yaml")
    output = _wait(_cli("train", str(recipe), "--output-dir", str(tmp_path / "straight")))
    assert "Ray rollout worker" in output

    interrupted = tmp_path / "interrupted"
    process = _cli("train", str(recipe), "--output-dir", str(interrupted))
    deadline = time.monotonic() + 300
    while not (interrupted / "checkpoints" / "step-000001" / COMPLETE).is_file():
        assert process.poll() is None, process.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the driver (and anything in its session)
    process.wait()
    assert not (interrupted / "final").exists()
    _wait(_cli("train", "--resume", str(interrupted)))

    straight, resumed = (
        load_file(tmp_path / "straight" / "final" / "model.safetensors"),
        load_file(interrupted / "final" / "model.safetensors"),
    )
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name
    # The sampler-vs-trainer mismatch metrics may differ in float noise: a resumed worker
    # decodes in a fresh session (other cache shapes) where the straight run's kept its own.
    straight_metrics, resumed_metrics = _metrics(tmp_path / "straight"), _metrics(interrupted)
    assert len(resumed_metrics) == STEPS
    for expected, got in zip(straight_metrics, resumed_metrics):
        assert expected.keys() == got.keys()
        for key in expected:
            if key.startswith("rollout_") and key != "rollout_failed_groups":
                assert got[key] == pytest.approx(expected[key], abs=1e-6), key
            else:
                assert got[key] == expected[key], key


@pytest.mark.slow
def test_async_run_reports_staleness(tmp_path) -> None:
    recipe = _recipe(tmp_path / "recipe.yaml", max_staleness=1, rollout_workers=2, worker_cpus=0.5)
    _wait(_cli("train", str(recipe), "--output-dir", str(tmp_path / "run")))
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == STEPS
    assert all(step["staleness_max"] <= 1 and "stale_dropped" in step and "groups_in_flight" in step for step in steps)
    assert steps[0]["staleness_max"] == 0  # nothing trained yet
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()


@pytest.mark.slow
def test_trainer_group_of_two_ray_ranks_equals_one_process(tmp_path) -> None:
    """`--nproc 2` with distributed.engine ray: two trainer ranks as Ray actors (DDP, gloo),
    rank 0 asking the rollout worker and broadcasting the groups; the same samples and,
    to float32 reduction order, the same weights as one trainer process."""
    recipe = _recipe(tmp_path / "recipe.yaml", trainer_cpus=0.5, worker_cpus=0.5)
    _wait(_cli("train", str(recipe), "--output-dir", str(tmp_path / "one")))
    output = _wait(_cli("train", str(recipe), "--nproc", "2", "--output-dir", str(tmp_path / "two")))
    assert "rollout workers ready" in output and "TrainerRank" in output  # rank 0's output, through Ray
    one, two = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    assert len(two) == STEPS
    for expected, got in zip(one, two):
        assert got["reward_mean"] == expected["reward_mean"] and got["response_length"] == expected["response_length"]
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-4, abs=1e-6)
    single, ranks = (
        load_file(tmp_path / "one" / "final" / "model.safetensors"),
        load_file(tmp_path / "two" / "final" / "model.safetensors"),
    )
    for name in single:
        torch.testing.assert_close(ranks[name].float(), single[name].float(), rtol=0, atol=5e-5)

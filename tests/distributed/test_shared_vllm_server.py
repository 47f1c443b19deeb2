"""Several trainer ranks on one vLLM server (the fake one, tests/engines/fake_vllm): rank 0
pushes the weights after every optimizer step, every rank samples its share from the
server, and no rank sends a request while a push is being loaded (each reload is slowed to
a second here, so a rank that did not wait would be counted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from agentic_rl.engines.remote import serve_folder
from agentic_rl.engines.vllm_server import VLLMServer
from agentic_rl.models import load

FAKE = Path(__file__).resolve().parents[1] / "engines" / "fake_vllm"


@pytest.fixture
def fake_server(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]))
    serve_folder(*load("tiny-random", device="cpu"), tmp_path / "model", torch.float32)
    server = VLLMServer(tmp_path / "model", python=sys.executable, dtype="float32", log_path=tmp_path / "server.log")
    server.start()
    httpx.post(f"{server.base_url}/fake/slow_reload", json={"delay_s": 1.0}).raise_for_status()
    yield server
    server.stop()


def _train_on_two_ranks(server: VLLMServer, strategy: str, run: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "agentic_rl", "train", "smoke", "--nproc", "2", "--output-dir", str(run)]
    for setting in (
        "backend.kind=vllm",
        f"backend.base_url={server.base_url}",
        f"trainer.strategy={strategy}",
        "precision=fp32",
        "rl.skip_zero_advantage=false",
        "checkpoint_every=0",
        "tracking.report=false",
    ):
        command += ["--set", setting]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_API_KEY": server.api_key}  # a running server's key
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_share_one_server_that_rank_zero_feeds(fake_server, strategy, tmp_path) -> None:
    run = tmp_path / "run"
    done = _train_on_two_ranks(fake_server, strategy, run)
    assert done.returncode == 0, done.stderr[-3000:]
    state = httpx.get(f"{fake_server.base_url}/fake/state").json()
    assert state["reloads"] == 2  # one push per RL step, by rank 0 alone
    assert state["during_reload"] == 0, "a rank sampled while rank 0's push was loading"
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1] and all(s["weight_sync_time_s"] >= 1.0 for s in steps)
    rows = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    versions = {}
    for row in rows:
        versions.setdefault(row["step"], set()).update(row["weight_versions"])
    assert versions[1] == {v + 1 for v in versions[0]}  # step 1 sampled from the weights pushed after step 0
    # Both ranks sampled through the server: more requests than one rank's share of the steps.
    assert len(state["requests"]) >= 2 * 2 * 2  # 2 steps x 2 tasks x 2 samples, one turn at least each


def test_a_failed_push_ends_every_rank_with_one_line(fake_server, tmp_path) -> None:
    # More failures than the client retries: the push fails for good.
    httpx.post(f"{fake_server.base_url}/fake/fail_reload", json={"n": 10}).raise_for_status()
    done = _train_on_two_ranks(fake_server, "ddp", tmp_path / "run")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("agentic-rl: error: weight sync into")]
    # Every rank raises the same line at once (the first to exit has torchrun stop the other,
    # which may not get to print it); none is left waiting for a collective.
    assert lines and len(set(lines)) == 1, done.stderr[-3000:]
    assert "HTTP 500" in lines[0] and "scripted reload failure" in lines[0]


@pytest.mark.slow
def test_the_ray_trainer_group_runs_on_vllm_servers(tmp_path, monkeypatch) -> None:
    """`--nproc 2` with `distributed.engine: ray`: the trainer ranks are Ray actors, the Ray
    rollout worker samples from its own managed vLLM server and rank 0 evaluates on the
    shared one."""
    pytest.importorskip("ray")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]))
    run = tmp_path / "run"
    command = [sys.executable, "-m", "agentic_rl", "train", "smoke", "--nproc", "2", "--output-dir", str(run)]
    for setting in (
        "backend.kind=vllm",
        f"backend.python={sys.executable}",
        "distributed.engine=ray",
        "distributed.trainer_cpus=0.5",
        "distributed.worker_cpus=0.5",
        "precision=fp32",
        "rl.skip_zero_advantage=false",
        "checkpoint_every=0",
        "tracking.report=false",
    ):
        command += ["--set", setting]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1] and all(s["skipped_infra"] == 0.0 for s in steps)
    rows = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    versions = {}
    for row in rows:
        versions.setdefault(row["step"], set()).update(row["weight_versions"])
    assert versions[1] == {v + 1 for v in versions[0]}  # the worker's server got the weights of step 0

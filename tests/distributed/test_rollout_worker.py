"""The rollout worker without Ray: requests from several threads share one engine session,
new weights are staged and taken over (in process: between decode steps; a vLLM server:
between turns, requests held meanwhile), a worker behind catches up from the weights its
request carries."""

from __future__ import annotations

import copy
import os
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

from agentic_rl.config import TrainConfig
from agentic_rl.distributed.rollout_worker import RolloutWorker
from agentic_rl.engines.base import Completion, SamplingParams
from agentic_rl.engines.hf import HFBackend
from agentic_rl.engines.request_session import RequestSession
from agentic_rl.engines.staged import StagedWeights
from agentic_rl.envs.registry import env_factory
from agentic_rl.rollout.engine import rollout
from agentic_rl.seeds import stream_seed

FAKE_VLLM = Path(__file__).parents[1] / "engines" / "fake_vllm"


def _config(**overrides) -> TrainConfig:
    data = {
        "model": {"name": "tiny-random", "device": "cpu"},
        "env": {"name": "arithmetic"},
        "precision": "fp32",
        "rollout": {"max_new_tokens": 8, "max_total_tokens": 512},
    }
    data.update(overrides)
    return TrainConfig.model_validate(data)


def test_groups_equal_in_process_rollouts_whatever_the_arrival(tiny) -> None:
    """Four requests from four threads into one session: the same tokens as one
    in-process rollout of the four tasks with the same streams."""
    model, tokenizer = tiny
    config = _config()
    make_env = env_factory("arithmetic", {}, split="train")
    expected = rollout(
        HFBackend(model, tokenizer), make_env, [0, 1, 2, 3], group_size=2, config=config.rollout, seed=11
    )
    worker = RolloutWorker(config, engine=HFBackend(copy.deepcopy(model), tokenizer), make_env=make_env)
    try:
        results: dict[int, object] = {}
        threads = [
            threading.Thread(
                target=lambda p=p: results.__setitem__(
                    p, worker.rollout_group(p, [stream_seed(11, p * 2 + j) for j in range(2)])
                )
            )
            for p in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for position, group in enumerate(expected):
            assert [t.token_ids for t in results[position].trajectories] == [t.token_ids for t in group.trajectories]
    finally:
        worker.close()


def test_a_worker_behind_loads_the_weights_its_request_carries(tiny) -> None:
    model, tokenizer = tiny
    worker = RolloutWorker(
        _config(),
        engine=HFBackend(copy.deepcopy(model), tokenizer),
        make_env=env_factory("arithmetic", {}, split="train"),
    )
    try:
        new = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
        with pytest.raises(ValueError, match="needs 3 and carries none"):
            worker.rollout_group(0, [1], min_version=3)
        group = worker.rollout_group(0, [1, 2], min_version=3, weights=new)
        assert {v for t in group.trajectories for v in t.weight_versions} == {3}
        assert worker.info()["weight_version"] == 3
        assert all(torch.equal(p, new[n]) for n, p in worker.backend.model.named_parameters())
        assert worker.stage_weights(new, 2) == 3  # older than what it has: ignored
    finally:
        worker.close()


def test_the_training_step_reaches_every_env_reset(tiny) -> None:
    model, tokenizer = tiny
    worker = RolloutWorker(
        _config(env={"name": "ray_envs:ParityEnv"}),
        engine=HFBackend(copy.deepcopy(model), tokenizer),
        make_env=env_factory("ray_envs:ParityEnv", {}, split="train"),
    )
    try:
        assert [t.info["training_step"] for t in worker.rollout_group(0, [1, 2], training_step=7).trajectories] == [
            7,
            7,
        ]
        assert [t.info["training_step"] for t in worker.rollout_group(1, [3]).trajectories] == [
            None
        ]  # evaluation gives none
    finally:
        worker.close()


class _Remote:
    """A RemoteTokenBackend stand-in whose requests finish when the test says."""

    def __init__(self) -> None:
        self.weight_version = 0
        self.staged = StagedWeights(self._load)
        self.submitted: list[Future] = []

    def _load(self, weights, version) -> None:
        self.weight_version = version

    def apply_staged(self):
        return self.staged.apply()

    def request_body(self, prompt, sampling, **kwargs):
        return {"prompt": list(prompt)}

    def submit(self, body) -> Future:
        future: Future = Future()
        self.submitted.append(future)
        return future


def test_a_server_session_holds_new_requests_until_the_swap() -> None:
    """Weights staged while a request is in flight: new requests wait, the swap happens
    when nothing is in flight, then the held requests go out (sampled by the new version)."""
    backend = _Remote()
    session = RequestSession(backend, SamplingParams(), stop_token_ids=[2])
    session.submit("a", [1, 2, 3], 4, seed=0)
    backend.staged.stage({}, 5)
    session.submit("b", [4, 5], 4, seed=1)
    assert len(backend.submitted) == 1 and session.held == [("b", 4)] and session.busy
    backend.submitted[0].set_result(Completion([7], [-0.1], "stop", weight_version=0))
    assert [key for key, _ in session.step()] == ["a"]
    assert backend.weight_version == 0  # the swap waits for the next step with nothing in flight
    assert session.step() == [] and backend.weight_version == 5
    assert len(backend.submitted) == 2 and session.held == []


@pytest.mark.skipif(sys.platform != "linux", reason="the fake vLLM server runs as a subprocess")
def test_a_worker_with_a_managed_vllm_server_pushes_staged_weights_between_turns(tiny, monkeypatch) -> None:
    """backend.kind vllm in a worker: its own managed (fake) server; staged weights reach
    the server before the next request, and the turns record the version that sampled them
    (the fake server's log-prob tells which weights answered: -0.5 / (1 + reloads))."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_VLLM), os.environ.get("PYTHONPATH", "")]))
    model, _ = tiny
    config = _config(backend={"kind": "vllm", "python": sys.executable, "max_concurrency": 4})
    worker = RolloutWorker(config)
    try:
        first = worker.rollout_group(0, [1, 2])
        assert {v for t in first.trajectories for v in t.weight_versions} == {0}
        assert {lp for t in first.trajectories for lp, m in zip(t.sampler_logprobs, t.loss_mask) if m} == {-0.5}
        worker.stage_weights({name: p.detach().clone() for name, p in model.named_parameters()}, 1)
        second = worker.rollout_group(1, [3, 4], min_version=1)
        assert {v for t in second.trajectories for v in t.weight_versions} == {1}
        assert {lp for t in second.trajectories for lp, m in zip(t.sampler_logprobs, t.loss_mask) if m} == {-0.25}
    finally:
        worker.close()

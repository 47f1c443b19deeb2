"""The Backend contract every engine implements: interface, weight_version stamped on
completions and recorded per turn, sync_weights after an update, close()."""

from __future__ import annotations

import pytest

from agentic_rl.config import RolloutConfig
from agentic_rl.engines import Backend, build_backend
from agentic_rl.engines.hf import HFBackend
from agentic_rl.engines.openai import OpenAIChatBackend
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.rollout import rollout


class TwoTurns:
    """Turn 1 gets an observation, turn 2 ends the episode."""

    num_tasks = 1

    def reset(self, *, seed=None, options=None):
        self.turn = 0
        return [{"role": "user", "content": "Hi."}], {"task_id": "t"}

    def step(self, message):
        self.turn += 1
        if self.turn == 2:
            return [], 1.0, True, False, {}
        return [{"role": "tool", "content": "ok"}], 0.0, False, False, {}


class SyncBetweenTurns(ScriptedBackend):
    """Takes new weights after its first generate call (as an async trainer would)."""

    def generate(self, prompts, sampling, **kwargs):
        completions = super().generate(prompts, sampling, **kwargs)
        self.sync_weights()
        return completions


def test_engines_implement_the_contract(tiny, tokenizer) -> None:
    model, _ = tiny
    engines = [
        HFBackend(model, tokenizer),
        ScriptedBackend(tokenizer, ["x"]),
        OpenAIChatBackend("m", "http://127.0.0.1:9/v1"),
    ]
    assert [e.interface for e in engines] == ["tokens", "tokens", "chat"]
    assert all(isinstance(e, Backend) and e.weight_version == 0 for e in engines)
    for engine in engines:
        engine.close()


def test_sync_weights_counts_versions_and_stamps_completions(tiny, tokenizer) -> None:
    model, _ = tiny
    engine = HFBackend(model, tokenizer)
    [group] = rollout(engine, TwoTurns, [0], config=RolloutConfig(max_new_tokens=4), seed=0)
    assert group.trajectories[0].weight_versions == [0]
    assert engine.sync_weights(model) == 1 and engine.sync_weights(model) == 2
    [group] = rollout(engine, TwoTurns, [0], config=RolloutConfig(max_new_tokens=4), seed=0)
    trajectory = group.trajectories[0]
    assert [turn.weight_version for turn in trajectory.turns] == [2, 2]
    assert trajectory.to_dict()["weight_versions"] == [2]


def test_a_trajectory_records_every_version_that_sampled_it(tokenizer) -> None:
    engine = SyncBetweenTurns(tokenizer, ["first", "second"])
    [group] = rollout(engine, TwoTurns, [0], config=RolloutConfig(continuous_batching=False))
    assert [turn.weight_version for turn in group.trajectories[0].turns] == [0, 1]
    assert group.trajectories[0].weight_versions == [0, 1]


def test_a_remote_endpoint_cannot_take_weights() -> None:
    engine = OpenAIChatBackend("m", "http://127.0.0.1:9/v1")
    with pytest.raises(NotImplementedError, match="cannot take the trainer's weights"):
        engine.sync_weights()
    engine.close()


def test_one_factory_builds_every_engine(tiny) -> None:
    from agentic_rl.config import BackendConfig, ModelConfig

    hf = build_backend(BackendConfig(batch_size=3), ModelConfig(name="tiny-random"), loaded=tiny)
    assert isinstance(hf, HFBackend) and hf.model is tiny[0] and hf.batch_size == 3
    remote = build_backend(BackendConfig(kind="openai", base_url="http://127.0.0.1:9/v1"), ModelConfig(name="m"))
    assert isinstance(remote, OpenAIChatBackend) and remote.url == "http://127.0.0.1:9/v1/chat/completions"
    remote.close()

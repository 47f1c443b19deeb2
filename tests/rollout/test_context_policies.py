"""Context policies (rollout.context): window and fold cut what the model sees; each cut
starts a new segment, and every sample is token for token what the engine was given and
sampled, with both schedulers. Segments share the episode's outcome and advantage."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.config import RolloutConfig, TrainConfig
from agentic_rl.engines.hf import HFBackend
from agentic_rl.rollout.context import FOLD_STUB, context_messages
from agentic_rl.rollout.engine import rollout
from agentic_rl.training.rl import RLTrainer

pytestmark = pytest.mark.usefixtures("one_thread")


def _history(turns: int) -> list[dict]:
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for t in range(turns):
        history += [{"role": "assistant", "content": f"a{t}"}, {"role": "tool", "content": f"out{t}"}]
    return history


def test_policies_by_hand() -> None:
    history = _history(4)
    assert context_messages("full", history, opening=2, turns=2) == history
    assert context_messages("window", history, opening=2, turns=2) == history[:2] + history[6:]
    folded = context_messages("fold", history, opening=2, turns=2)
    assert [m["content"] for m in folded] == ["s", "task", "a0", FOLD_STUB, "a1", FOLD_STUB, "a2", "out2", "a3", "out3"]
    assert history[3]["content"] == "out0"  # the history itself is never changed
    for policy in ("window", "fold"):  # nothing to cut yet
        assert context_messages(policy, _history(2), opening=2, turns=2) == _history(2)
    with pytest.raises(ValueError, match="rollout.context"):
        context_messages("summary", history, opening=2, turns=2)


class ToolEnv:
    """Four turns of long tool output; reward 1 when the last reply has an even length."""

    num_tasks = 16

    def reset(self, *, seed=None, options=None):
        self.turn = 0
        index = (options or {}).get("task_index", 0)
        return [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": f"Task {index}."}], {"task_id": f"t{index}"}

    def step(self, message):
        self.turn += 1
        if self.turn >= 4:
            reward = float(len(message["content"]) % 2 == 0)
            return [], reward, True, False, {"correct": reward > 0}
        return [{"role": "tool", "content": f"result {self.turn}: " + "data " * 20}], 0.0, False, False, {}


class Recording(HFBackend):
    """The in-process engine, recording (prompt ids, sampled ids) of every turn it served
    (both schedulers decode through sessions: ``generate`` opens one too)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.served: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def session(self, sampling, *, stop_token_ids):
        return _RecordingSession(super().session(sampling, stop_token_ids=stop_token_ids), self.served)


class _RecordingSession:
    def __init__(self, inner, served) -> None:
        self.inner, self.served, self.contexts = inner, served, {}

    def __enter__(self):
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)

    @property
    def busy(self):
        return self.inner.busy

    def submit(self, key, token_ids, max_new_tokens, seed):
        self.contexts[key] = list(token_ids)
        self.inner.submit(key, token_ids, max_new_tokens, seed)

    def extend(self, key, token_ids, max_new_tokens):
        self.contexts[key] += list(token_ids)
        self.inner.extend(key, token_ids, max_new_tokens)

    def release(self, key):
        self.inner.release(key)

    def step(self):
        finished = self.inner.step()
        for key, completion in finished:
            self.served.append((tuple(self.contexts[key]), tuple(completion.token_ids)))
            self.contexts[key] += completion.token_ids
        return finished


@pytest.mark.parametrize("continuous", [True, False])
@pytest.mark.parametrize(("policy", "turns"), [("window", 1), ("fold", 1), ("full", 1)])
def test_every_sample_is_what_the_engine_was_given_and_sampled(tiny, policy, turns, continuous) -> None:
    model, tokenizer = tiny
    backend = Recording(model, tokenizer)
    config = RolloutConfig(max_new_tokens=6, max_total_tokens=2048, context=policy, context_turns=turns, continuous_batching=continuous)
    groups = rollout(backend, ToolEnv, [0, 1], group_size=2, config=config, seed=3)
    served = set(backend.served)
    turns_seen = 0
    for trajectory in (t for g in groups for t in g.trajectories):
        assert trajectory.num_turns == 4
        samples = trajectory.samples
        assert len(samples) == (1 if policy == "full" else 3)  # turns 3 and 4 each cut the context
        for sample in samples:
            assert sample.reward == trajectory.reward and sample.termination_reason == trajectory.termination_reason
            for turn in sample.turns:
                prompt, sampled = tuple(sample.token_ids[: turn.response_start]), tuple(sample.token_ids[turn.response_start : turn.response_end])
                assert (prompt, sampled) in served  # exactly what the engine saw and sampled
                assert all(sample.loss_mask[turn.response_start : turn.response_end])
                turns_seen += 1
        if policy == "window":
            assert "result 1" not in tokenizer.decode(samples[-1].token_ids)  # slid out of the window
        if policy == "fold":
            assert FOLD_STUB in tokenizer.decode(samples[-1].token_ids)
    assert turns_seen == len(backend.served) == 16


def test_a_training_step_uses_every_segment(tiny) -> None:
    from agentic_rl import envs

    if "test-context-tools" not in {e.name for e in envs.registered()}:
        envs.register("test-context-tools", ToolEnv, "test env")
    config = TrainConfig.model_validate({
        "model": {"name": "tiny-random", "device": "cpu"}, "env": {"name": "test-context-tools"}, "precision": "fp32", "steps": 1, "tasks_per_step": 4, "group_size": 4,
        "rollout": {"max_new_tokens": 6, "max_total_tokens": 1024, "context": "window", "context_turns": 1}, "optim": {"lr": 1e-3},
    })
    model = copy.deepcopy(tiny[0])
    trainer = RLTrainer(config, model, tiny[1], HFBackend(model, tiny[1]), ToolEnv, list(range(16)))
    kept = trainer._sample()[1]
    scored, _, _ = trainer.score_groups(kept)
    assert len(scored.trajectories) == sum(len(t.samples) for g in kept for t in g.trajectories) == 16 * 3
    metrics = trainer.update(scored)
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algorithm": {"rollout": "arpo"}}, "algorithm.rollout: rollout.context window: ARPO branches within one growing context"),
        ({"algorithm": {"advantage": "gigpo"}}, "algorithm.advantage: rollout.context window: segments share one advantage per episode"),
        ({"algorithm": {"aggregation": "seq-mean-token-mean"}}, "algorithm.aggregation: rollout.context window: sequence-mean aggregation"),
    ],
)
def test_settings_a_context_policy_refuses(overrides, message) -> None:
    from agentic_rl.config import ConfigError, build

    with pytest.raises(ConfigError, match=message):
        build(TrainConfig, {"rollout": {"context": "window"}, **overrides})

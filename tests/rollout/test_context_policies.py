"""Context policies (rollout.context): window and fold cut what the model sees; each cut
starts a new segment, and every sample is token for token what the engine was given and
sampled, with both schedulers. Segments share the episode's outcome and advantage."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.config import RolloutConfig, TrainConfig
from agentic_rl.engines.hf import HFBackend
from agentic_rl.rollout.context import (
    FOLD_STUB,
    SUMMARY_HEADER,
    SUMMARY_REQUEST,
    context_messages,
    summary_context,
    summary_request,
)
from agentic_rl.rollout.engine import rollout
from agentic_rl.training.rl import RLTrainer
from agentic_rl.types import Trajectory

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
        return [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": f"Task {index}."}], {
            "task_id": f"t{index}"
        }

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
    config = RolloutConfig(
        max_new_tokens=6, max_total_tokens=2048, context=policy, context_turns=turns, continuous_batching=continuous
    )
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
                prompt, sampled = (
                    tuple(sample.token_ids[: turn.response_start]),
                    tuple(sample.token_ids[turn.response_start : turn.response_end]),
                )
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
    config = TrainConfig.model_validate(
        {
            "model": {"name": "tiny-random", "device": "cpu"},
            "env": {"name": "test-context-tools"},
            "precision": "fp32",
            "rl": {"steps": 1, "tasks_per_step": 4, "group_size": 4},
            "rollout": {"max_new_tokens": 6, "max_total_tokens": 1024, "context": "window", "context_turns": 1},
            "optim": {"lr": 1e-3},
        }
    )
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
        (
            {"rl": {"sampling": "arpo"}},
            "rl.sampling: rollout.context window: ARPO branches within one growing context",
        ),
        (
            {"algorithm": {"advantage": "gigpo"}},
            "algorithm.advantage.name: rollout.context window: segments share one advantage per episode",
        ),
        (
            {"algorithm": {"aggregation": "seq-mean-token-mean"}},
            "algorithm.aggregation: rollout.context window: sequence-mean aggregation",
        ),
    ],
)
def test_settings_a_context_policy_refuses(overrides, message) -> None:
    from agentic_rl.config import ConfigError, build

    with pytest.raises(ConfigError, match=message):
        build(TrainConfig, {"rollout": {"context": "window"}, **overrides})


# --------------------------------------------------------------------------- summarize


def test_summary_context_by_hand() -> None:
    history = _history(3)  # s, task, a0, out0, a1, out1, a2, out2
    assert summary_context(history, " facts: 1, 2 ", opening=2, keep_last=False) == [
        *history[:2],
        {"role": "user", "content": SUMMARY_HEADER + "facts: 1, 2"},
    ]
    assert summary_context(history, "facts", opening=2, keep_last=True) == [
        *history[:2],
        {"role": "user", "content": SUMMARY_HEADER + "facts"},
        *history[6:],
    ]
    assert context_messages("summarize", history, opening=2, turns=1) == history  # its cut is by tokens, in the episode
    assert summary_request()["content"] == SUMMARY_REQUEST
    assert summary_request("Keep the numbers.") == {"role": "user", "content": "Keep the numbers."}
    assert summary_context(history, "facts", opening=2, keep_last=False, header="Notes: ")[-1] == {
        "role": "user",
        "content": "Notes: facts",
    }


def test_a_configured_summary_request_and_header_reach_the_model(tiny) -> None:
    """rollout.context_summary_request / context_summary_header replace the defaults in
    what the engine is given (the request before the summary, the header after it)."""
    model, tokenizer = tiny
    backend = Recording(model, tokenizer)
    rollout_config = {
        "max_new_tokens": 6,
        "max_total_tokens": 1024,
        "context": "summarize",
        "context_tokens": 80,
        "context_summary_request": "List the results so far.",
        "context_summary_header": "Results so far: ",
    }
    config = TrainConfig.model_validate(
        {
            "model": {"name": "tiny-random", "device": "cpu"},
            "env": {"name": "arithmetic"},
            "precision": "fp32",
            "rollout": rollout_config,
        }
    )
    groups = rollout(backend, ToolEnv, [0], group_size=1, config=config.rollout, seed=7)
    before, after = groups[0].trajectories[0].samples[:2]
    assert before.messages[-2] == {"role": "user", "content": "List the results so far."}
    assert SUMMARY_REQUEST not in tokenizer.decode(before.token_ids)
    summary = before.turns[-1].assistant_text
    assert {"role": "user", "content": "Results so far: " + summary.strip()} in after.messages
    prompt = tokenizer.decode(after.token_ids[: after.prompt_length])
    assert "Results so far: " in prompt and SUMMARY_HEADER not in prompt


def test_an_empty_summary_request_is_refused() -> None:
    from agentic_rl.config import ConfigError, build

    with pytest.raises(ConfigError, match="context_summary_request: expected the text"):
        build(
            TrainConfig, {"rollout": {"context": "summarize", "context_tokens": 512, "context_summary_request": "  "}}
        )


@pytest.mark.parametrize("continuous", [True, False])
@pytest.mark.parametrize("keep_last", [False, True])
def test_summarize_trains_on_exactly_what_the_engine_was_given_and_sampled(tiny, continuous, keep_last) -> None:
    """Past the budget the model is asked for a summary; the summary tokens are sampled
    (loss_mask 1, the episode's advantage) and end their segment; the next segment's prompt
    is the opening, the summary (and the last turn) rendered afresh. The collated training
    batch holds every (prompt, sampled) pair the engine served, once, and nothing else."""
    from collections import Counter

    from agentic_rl.chat import ChatRenderer

    model, tokenizer = tiny
    backend = Recording(model, tokenizer)
    renderer = ChatRenderer(tokenizer)
    rollout_config = {
        "max_new_tokens": 6,
        "max_total_tokens": 1024,
        "context": "summarize",
        "context_tokens": 80,
        "context_keep_last": keep_last,
        "continuous_batching": continuous,
    }
    config = TrainConfig.model_validate(
        {
            "model": {"name": "tiny-random", "device": "cpu"},
            "env": {"name": "arithmetic"},
            "precision": "fp32",
            "rl": {"tasks_per_step": 2, "group_size": 2},
            "rollout": rollout_config,
        }
    )
    groups = rollout(backend, ToolEnv, [0, 1], group_size=2, config=config.rollout, seed=7)
    trainer = RLTrainer(config, model, tokenizer, backend, ToolEnv, list(range(16)))
    scored, _, _ = trainer.score_groups(groups)
    batch = trainer.updater._collate(scored, list(range(len(scored.trajectories))), None)
    pairs = []
    for row, sample in enumerate(scored.trajectories):
        ids = batch.input_ids[row, : len(sample.token_ids)].tolist()
        assert ids == sample.token_ids and batch.loss_mask[row, : len(ids)].tolist() == [
            float(m) for m in sample.loss_mask
        ]
        for turn in sample.turns:
            pairs.append((tuple(ids[: turn.response_start]), tuple(ids[turn.response_start : turn.response_end])))
            assert batch.loss_mask[row, turn.response_start : turn.response_end].tolist() == [1.0] * (
                turn.response_end - turn.response_start
            )
    assert Counter(pairs) == Counter(backend.served)  # token for token, each engine call once
    episodes = [t for g in groups for t in g.trajectories]
    for episode in episodes:
        assert (
            episode.num_turns == 4 and episode.summary_turns == 2
        )  # the env saw its 4 turns; the summaries it never saw
        samples = episode.samples
        assert len(samples) == 3
        for before, after in zip(samples, samples[1:]):
            summary = before.turns[-1]
            assert summary.summary and before.messages[-2] == summary_request()
            assert SUMMARY_REQUEST in tokenizer.decode(before.token_ids[: summary.response_start])
            shown = summary_context(before.messages[:-2], summary.assistant_text, opening=2, keep_last=keep_last)
            assert after.messages[: len(shown)] == shown
            assert after.token_ids[: after.prompt_length] == renderer.prompt_ids(
                shown
            )  # the new context, rendered afresh
            last_output = before.messages[-3]["content"]  # the tool output the summary request followed
            assert (
                last_output.startswith("result ")
                and (last_output in tokenizer.decode(after.token_ids[: after.prompt_length])) == keep_last
            )
    # Every sample of an episode carries its advantage (grpo over the episodes' rewards) on every sampled token.
    assert any(
        len({e.reward for e in episodes if e.group_id == g.group_id}) == 2 for g in groups
    )  # some advantage is not 0
    for episode in episodes:
        group = [e for e in episodes if e.group_id == episode.group_id]
        group_rewards = torch.tensor([e.reward for e in group])
        expected = float((episode.reward - group_rewards.mean()) / (group_rewards.std() + 1e-6))
        for sample in episode.samples:
            row = next(i for i, t in enumerate(scored.trajectories) if t is sample)
            assert scored.advantages[row] == pytest.approx([expected * m for m in sample.loss_mask])


def test_a_summary_never_reaches_the_env() -> None:
    """The schedulers run env steps in a thread pool, and a summary's ``apply_step`` does
    not wait for its (empty) step before clearing ``summarizing``: whether a turn steps the
    env is decided when the scheduler takes the turn, not when the pool gets to it (a
    summary that reached the env moved long-qa one chunk on, unseen)."""
    from agentic_rl.rollout.episode import Episode

    class Env:
        def __init__(self) -> None:
            self.steps: list[dict] = []

        def step(self, message):
            self.steps.append(message)
            return [], 0.0, False, False, {}

    env = Env()
    episode = Episode(Trajectory(task_id="t", group_id="g"), env, RolloutConfig(), None)
    episode.summarizing = True
    pooled = episode.env_step({"role": "assistant", "content": "the summary"})
    episode.summarizing = False  # what the summary's apply_step does before the pool runs the call
    assert pooled() is None and env.steps == []
    reply = {"role": "assistant", "content": "a turn"}
    assert episode.env_step(reply)() == ([], 0.0, False, False, {}) and env.steps == [reply]


def _sample(mask: list[int], reward: float, group: str = "g") -> Trajectory:

    return Trajectory(
        task_id="t",
        group_id=group,
        token_ids=list(range(len(mask))),
        loss_mask=list(mask),
        sampler_logprobs=[0.0] * len(mask),
        reward=reward,
    )


def test_segment_advantages_and_loss_weights_by_hand() -> None:
    """Episode A (reward 1) in three samples: a segment ending in its summary, a segment,
    and a last one that sampled nothing (the new prompt filled the budget); episode B
    (reward 0) in one. GRPO over the two episodes: mean 0.5, unbiased std sqrt(0.5), so
    A = +0.5 / sqrt(0.5) and B = -0.5 / sqrt(0.5) on every sampled token of every sample;
    token-mean weighs each of the 6 sampled tokens 1/6, so A's samples weigh 4/6 in all,
    as one unsplit sequence of A would."""
    from agentic_rl.algorithms.losses import aggregate
    from agentic_rl.config import AlgorithmConfig, RewardConfig
    from agentic_rl.training.batch import collate
    from agentic_rl.training.scoring import score
    from agentic_rl.types import TrajectoryGroup

    a = _sample([0, 0, 0], 1.0)
    a.segments = [_sample([0, 1, 1, 0, 1], 1.0), _sample([0, 0, 1], 1.0)]
    b = _sample([0, 1, 1], 0.0)
    scored = score(
        [TrajectoryGroup("t", "g", [a, b])],
        AlgorithmConfig(advantage="grpo"),
        max_total_tokens=64,
        reward=RewardConfig(overlong_buffer=0),
    )
    value = 0.5 / (0.5**0.5 + 1e-6)
    assert [t is s for t, s in zip(scored.trajectories, [*a.samples, b])] == [True] * 4
    assert scored.advantages == [
        pytest.approx(row) for row in ([0, value, value, 0, value], [0, 0, value], [0, 0, 0], [0, -value, -value])
    ]
    assert scored.rewards.tolist() == [1.0, 1.0, 1.0, 0.0]
    batch = collate(
        [t.token_ids for t in scored.trajectories],
        [t.loss_mask for t in scored.trajectories],
        pad_token_id=0,
        per_token={"advantages": scored.advantages},
    )
    weights = batch.loss_mask / batch.loss_mask.sum()  # token-mean: d loss / d (per-token loss)
    assert weights.sum(-1).tolist() == pytest.approx([3 / 6, 1 / 6, 0.0, 2 / 6])
    assert float(aggregate(batch.per_token["advantages"], batch.loss_mask, "token-mean")) == pytest.approx(
        (4 * value - 2 * value) / 6
    )


def test_summarize_budget_must_leave_room_below_the_token_limit() -> None:
    from agentic_rl.config import ConfigError, build

    with pytest.raises(
        ConfigError, match=r"rollout.context_tokens: with context summarize it must be below max_total_tokens \(1024\)"
    ):
        build(TrainConfig, {"rollout": {"context": "summarize", "context_tokens": 1024, "max_total_tokens": 1024}})
    with pytest.raises(ConfigError, match="rl.sampling: rollout.context summarize: ARPO"):
        build(TrainConfig, {"rollout": {"context": "summarize", "context_tokens": 512}, "rl": {"sampling": "arpo"}})
    assert (
        build(TrainConfig, {"rollout": {"context": "window", "context_tokens": 4096}}).rollout.context_tokens == 4096
    )  # only summarize reads it

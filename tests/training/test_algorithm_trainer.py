"""Trainer support for the algorithm family on the tiny model: the critic's values,
dynamic sampling rounds, turn data from real rollouts, KL in the reward, critic checkpoints."""

from __future__ import annotations

import copy

import pytest
import torch
from test_algorithm_recipes import TwoTurnEnv  # same directory (pytest puts it on sys.path)

from agentic_rl import envs
from agentic_rl.config import TrainConfig
from agentic_rl.engines.hf import HFBackend
from agentic_rl.rollout.engine import rollout
from agentic_rl.training.batch import collate
from agentic_rl.training.checkpoint import load_checkpoint, save_checkpoint
from agentic_rl.training.credit import build_advantage_inputs
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.rl import RLTrainer
from agentic_rl.training.value import Critic
from agentic_rl.types import Trajectory, Turn


class ConstantEnv:
    """One turn, reward 1 on tasks 0-31 and 0 on the rest: every group has zero variance."""

    num_tasks = 64

    def __init__(self, **options) -> None:
        self.index = 0

    def reset(self, *, seed=None, options=None):
        self.index = (options or {}).get("task_index", 0)
        return [{"role": "user", "content": f"Task {self.index}."}], {"task_id": str(self.index)}

    def step(self, message):
        reward = float(self.index < 32)
        return [], reward, True, False, {"answer": "", "correct": reward > 0, "tool_results": []}


@pytest.fixture(autouse=True, scope="module")
def _envs():
    for name, cls in (("test-two-turn", TwoTurnEnv), ("test-constant", ConstantEnv)):
        if name not in {e.name for e in envs.registered()}:
            envs.register(name, cls, "test env")
    torch.set_num_threads(1)


def _config(env: str = "test-two-turn", rl: dict | None = None, **algorithm) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "model": {"name": "tiny-random", "device": "cpu"},
            "env": {"name": env},
            "rollout": {"max_new_tokens": 10, "max_total_tokens": 256},
            "rl": {"steps": 2, "tasks_per_step": 3, "group_size": 4, **(rl or {})},
            "optim": {"lr": 1e-3},
            "algorithm": algorithm,
        }
    )


def _trainer(tiny, config: TrainConfig, env=TwoTurnEnv) -> RLTrainer:
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    return RLTrainer(config, model, tokenizer, HFBackend(model, tokenizer), env, list(range(env.num_tasks)))


def _two_turn_groups(tiny, tasks=2, group_size=4):
    model, tokenizer = tiny
    config = _config()
    return rollout(
        HFBackend(model, tokenizer),
        TwoTurnEnv,
        list(range(tasks)),
        group_size=group_size,
        config=config.rollout,
        seed=3,
    )


def test_shared_critic_values_from_the_policy_forward_equal_a_direct_computation(tiny) -> None:
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    critic = Critic(model, "shared", lr=1e-3)
    torch.nn.init.normal_(critic.head.linear.weight)
    trajectories = [t for g in _two_turn_groups(tiny) for t in g.trajectories]
    batch = collate(
        [t.token_ids for t in trajectories], [t.loss_mask for t in trajectories], pad_token_id=tokenizer.pad_token_id
    )
    with critic.values_from_policy_forward(batch.loss_mask) as captured:
        token_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask)
    direct = critic.values(batch.input_ids, batch.attention_mask, batch.loss_mask)
    hidden = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    by_hand = torch.zeros_like(direct)
    by_hand[:, 1:] = critic.head(hidden[:, :-1]) * batch.loss_mask[:, 1:]  # V(s_t) from the state at t - 1
    assert torch.allclose(captured["values"], direct, atol=1e-5)
    assert torch.allclose(direct, by_hand, atol=1e-5)
    assert (direct[batch.loss_mask == 0] == 0).all() and direct[batch.loss_mask == 1].abs().sum() > 0


def test_turn_data_from_real_two_turn_rollouts(tiny) -> None:
    groups = _two_turn_groups(tiny)
    trajectories = [t for g in groups for t in g.trajectories]
    group_index = torch.tensor([i for i, g in enumerate(groups) for _ in g.trajectories])
    rewards = torch.tensor([t.reward for t in trajectories])
    inputs = build_advantage_inputs(trajectories, rewards, group_index, tool_turn_reward=0.5)
    for row, t in enumerate(trajectories):
        first = t.turns[0]
        assert first.turn_reward == 0.25 * (len(first.assistant_text) % 3 == 0)  # the env's info["turn_reward"]
        expected_turn_reward = first.turn_reward + 0.5 * first.tool_results[0].ok
        assert inputs.turn_rewards[row, 0].item() == pytest.approx(expected_turn_reward)
        assert inputs.first_tool_turn[row].item() == 0
        mask = torch.tensor(t.loss_mask)
        sampled = mask.nonzero().squeeze(1)
        turn_of = inputs.turn_index[row, : len(mask)]
        assert set(turn_of[sampled].tolist()) <= {0, 1} and (turn_of[sampled] >= 0).all()
        # token rewards: the turn reward on turn 0's last sampled token, the outcome on the episode's last one
        last_turn0 = max(p for p in range(first.response_start, first.response_end) if t.loss_mask[p])
        assert inputs.token_rewards[row, last_turn0].item() == pytest.approx(
            expected_turn_reward + (t.reward if t.num_turns == 1 else 0.0)
        )
        assert inputs.token_rewards[row].sum().item() == pytest.approx(expected_turn_reward + t.reward)
        # turn 0 of every member of a task group shares the anchor state (the same prompt)
    for g, _group in enumerate(groups):
        rows = (group_index == g).nonzero().squeeze(1)
        assert len(set(inputs.anchor_index[rows, 0].tolist())) == 1
    assert inputs.anchor_index[0, 0] != inputs.anchor_index[-1, 0]  # different tasks never share anchors


def test_kl_in_the_reward_lowers_token_and_sequence_rewards() -> None:
    t = Trajectory(
        "t",
        "g",
        prompt_length=1,
        token_ids=[1, 2, 3, 4],
        loss_mask=[0, 1, 0, 1],
        turns=[Turn("x", 1, 2, 3), Turn("y", 3, 4, 4)],
        reward=1.0,
    )
    inputs = build_advantage_inputs(
        [t], torch.tensor([1.0]), torch.tensor([0]), token_kl=[[0.0, 0.5, 9.0, 0.25]], kl_coef=0.1
    )
    assert inputs.token_rewards.tolist()[0] == pytest.approx(
        [0.0, -0.05, 0.0, 1.0 - 0.025]
    )  # the 9.0 is on an observation token
    assert inputs.rewards.item() == pytest.approx(1.0 - 0.075)


def test_dapo_dynamic_sampling_keeps_only_groups_with_variance(tiny) -> None:
    trainer = _trainer(tiny, _config(preset="dapo", rl={"max_generation_rounds": 4}))
    sampled, kept, metrics = trainer._sample()
    assert 1 <= metrics["generation_rounds"] <= 4 and metrics["groups_sampled"] == len(sampled)
    assert len(kept) == metrics["groups_kept"] <= 3
    assert all(len(set(g.rewards)) > 1 for g in kept)
    dropped = [g for g in sampled if g not in kept]
    assert all(len(set(g.rewards)) == 1 for g in dropped) or len(kept) == 3
    if metrics["generation_rounds"] > 1:
        assert len(sampled) > 3  # later rounds sampled more tasks


def test_dapo_with_only_zero_variance_groups_uses_every_round_and_skips_the_update(tiny) -> None:
    trainer = _trainer(tiny, _config("test-constant", preset="dapo", rl={"max_generation_rounds": 3}), env=ConstantEnv)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics, groups = trainer.step()
    assert metrics["generation_rounds"] == 3 and metrics["groups_kept"] == 0
    assert metrics["groups_sampled"] == 9 and len(groups) == 9  # 3 tasks per round, every round
    assert "loss" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    # The diagnostics of the skipped step are still there (a gradient-free forward).
    assert metrics["entropy"] > 0 and metrics["rollout_logprob_diff_mean"] < 1e-3 and "rollout_kl_k3" in metrics


def test_a_step_where_every_group_scored_alike_still_logs_entropy_and_the_sampler_mismatch(tiny) -> None:
    trainer = _trainer(tiny, _config("test-constant"), env=ConstantEnv)  # GRPO: every advantage is zero
    metrics, _ = trainer.step()
    assert metrics["zero_advantage_skipped"] == 1.0
    assert metrics["entropy"] > 0 and metrics["rollout_logprob_diff_max"] < 1e-2
    assert {"rollout_logprob_diff_mean", "rollout_kl_k3"} <= set(metrics)


def test_critic_checkpoint_round_trip(tiny, tmp_path) -> None:
    trainer = _trainer(tiny, _config(preset="ppo", critic={"kind": "separate", "lr": 1e-2}))
    trainer.step()
    save_checkpoint(
        tmp_path,
        1,
        model=trainer.model,
        trainer_state=trainer.state_dict(),
        info={},
        keep=1,
        critic_module=trainer.critic.module,
    )
    fresh = _trainer(tiny, _config(preset="ppo", critic={"kind": "separate", "lr": 1e-2}))
    trainer_state, _ = load_checkpoint(tmp_path / "step-000001", model=fresh.model, critic_module=fresh.critic.module)
    fresh.load_state_dict(trainer_state)
    assert fresh.steps_done == 1
    for (name, a), b in zip(trainer.critic.module.state_dict().items(), fresh.critic.module.state_dict().values()):
        assert torch.equal(a, b), name
    assert trainer.critic.head.linear.weight.abs().sum() > 0
    state = fresh.critic.optimizer.state_dict()["state"]
    assert state and all(
        torch.equal(v["exp_avg"], trainer.critic.optimizer.state_dict()["state"][k]["exp_avg"])
        for k, v in state.items()
    )


def test_config_errors_name_the_field() -> None:
    from agentic_rl.config import ConfigError, build

    with pytest.raises(ConfigError, match=r"^algorithm\.critic: the gae advantage needs a critic"):
        build(TrainConfig, {"algorithm": {"preset": "ppo", "critic": "none"}})
    with pytest.raises(ConfigError, match="algorithm.group_filter"):
        build(TrainConfig, {"algorithm": {"group_filter": "top"}})
    with pytest.raises(ConfigError, match=r"^rl\.group_size: the gigpo advantage needs at least 2 samples"):
        build(TrainConfig, {"algorithm": {"preset": "gigpo"}, "rl": {"group_size": 1}})


def test_remax_scores_each_sample_against_a_greedy_rollout_of_its_task(tiny) -> None:
    trainer = _trainer(tiny, _config(advantage="remax"))
    groups, kept, metrics = trainer._sample()
    assert all(g.baseline is not None and g.baseline.infra_error is None for g in groups)
    # The baseline is the greedy rollout: sampling the task again at temperature 0 gives its tokens.
    model, tokenizer = trainer.model, trainer.tokenizer
    greedy = rollout(
        HFBackend(model, tokenizer),
        TwoTurnEnv,
        [groups[0].task_index],
        config=trainer.config.rollout.model_copy(update={"temperature": 0.0}),
        seed=123,
    )[0].trajectories[0]
    assert greedy.token_ids == groups[0].baseline.token_ids
    assert metrics["remax_baseline_reward"] == pytest.approx(sum(g.baseline.reward for g in groups) / len(groups))
    scored, _, _ = trainer.score_groups(kept, groups)
    baseline_of = {g.group_id: g.baseline.reward for g in groups}  # no shaping terms configured
    for row, trajectory in enumerate(scored.trajectories):
        last = max(i for i, m in enumerate(trajectory.loss_mask) if m)
        # The outcome sits on the last sampled token: A = r - b there (ReMax, gamma 1).
        assert scored.advantages[row][last] == pytest.approx(
            float(scored.rewards[row]) - baseline_of[trajectory.group_id]
        )
    metrics = trainer.step()[0]
    assert "remax_baseline_reward" in metrics and metrics["step"] == 0

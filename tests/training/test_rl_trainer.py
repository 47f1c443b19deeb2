"""The RL trainer on the tiny model: updates, masking, determinism, KL and LoRA paths."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl import envs
from agentic_rl.algorithms import policy_loss
from agentic_rl.config import TrainConfig
from agentic_rl.engines.hf import HFBackend
from agentic_rl.training.batch import collate
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.rl import RLTrainer
from agentic_rl.training.rl_metrics import MACHINE_METRICS
from agentic_rl.training.rl_update import PolicyUpdate
from agentic_rl.training.scoring import score


class ParityEnv:
    """One turn; reward 1 when the reply has an even number of characters. Random text
    from the tiny model gets both outcomes, so groups have reward variance."""

    num_tasks = 64

    def reset(self, *, seed=None, options=None):
        index = (options or {}).get("task_index", 0)
        return [
            {"role": "system", "content": "Reply."},
            {"role": "user", "content": f"Task {index}: say something."},
        ], {"task_id": f"parity-{index}"}

    def step(self, message):
        reward = float(len(message["content"]) % 2 == 0)
        return [], reward, True, False, {"answer": message["content"], "correct": reward > 0, "tool_results": []}


@pytest.fixture(autouse=True, scope="module")
def _parity_env():
    if "test-parity" not in {e.name for e in envs.registered()}:
        envs.register("test-parity", ParityEnv, "test env")
    torch.set_num_threads(1)


def _config(**overrides) -> TrainConfig:
    """The test config with ``overrides`` per section; ``rl`` updates the section's values
    here (steps, tasks_per_step, group_size), every other section is replaced."""
    data = {
        "model": {"name": "tiny-random", "device": "cpu"},
        "env": {"name": "test-parity"},
        "rollout": {"max_new_tokens": 12, "max_total_tokens": 256},
        "rl": {"steps": 2, "tasks_per_step": 4, "group_size": 4},
        "optim": {"lr": 1e-3},
    }
    for key, value in overrides.items():
        data[key] = {**data["rl"], **value} if key == "rl" else value
    return TrainConfig.model_validate(data)


def _trainer(tiny, config: TrainConfig) -> RLTrainer:
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    return RLTrainer(config, model, tokenizer, HFBackend(model, tokenizer), ParityEnv, list(range(ParityEnv.num_tasks)))


def test_grpo_step_changes_every_trainable_parameter(tiny) -> None:
    trainer = _trainer(tiny, _config())
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    metrics, groups = trainer.step()
    assert metrics["frac_zero_std_groups"] < 1.0, "need reward variance for a non-zero update"
    assert metrics["grad_norm"] > 0
    unchanged = [name for name, p in trainer.model.named_parameters() if torch.equal(p, before[name])]
    assert unchanged == []
    assert len(groups) == 4 and all(len(g.trajectories) == 4 for g in groups)


def test_metrics_have_the_documented_keys(tiny) -> None:
    metrics, _ = _trainer(tiny, _config()).step()
    for key in (
        "reward_mean",
        "reward_std",
        "accuracy",
        "entropy",
        "kl",
        "clip_frac_low",
        "clip_frac_high",
        "grad_norm",
        "response_length",
        "tool_calls_per_episode",
        "tool_success_rate",
        "malformed_call_rate",
        "step_time_s",
        "tokens_per_s",
        "frac_zero_std_groups",
    ):
        assert key in metrics, key
    assert metrics["ratio_mean"] == pytest.approx(1.0)  # one update per batch: exactly on-policy
    assert 0.0 <= metrics["accuracy"] <= 1.0


def test_same_seed_same_metrics(tiny) -> None:
    def run() -> list[dict]:
        trainer = _trainer(tiny, _config())
        return [{k: v for k, v in trainer.step()[0].items() if k not in MACHINE_METRICS} for _ in range(2)]

    first, second = run(), run()
    assert first == second
    assert first[0] != first[1]


def test_loss_ignores_logits_at_unmasked_positions(tiny) -> None:
    """Replacing the model's predictions at loss_mask=0 positions by garbage must not
    change the loss or its gradient: only sampled tokens are trained on."""
    model, tokenizer = tiny
    batch = collate(
        [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16]],
        [[0, 0, 1, 1, 0, 1, 1], [0, 1, 1, 0, 1]],
        pad_token_id=tokenizer.pad_token_id,
        per_token={"a": [[0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], [0.0, -1.0, -1.0, 0.0, -1.0]]},
    )
    logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask)
    ours = policy_loss(logprobs, logprobs.detach(), batch.per_token["a"], batch.loss_mask).loss

    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()
    garbage = torch.randn_like(logits) * 50
    predicts_unmasked = torch.zeros_like(batch.loss_mask, dtype=torch.bool)
    predicts_unmasked[:, :-1] = batch.loss_mask[:, 1:] == 0  # logits at t-1 predict token t
    logits = torch.where(predicts_unmasked[..., None], garbage, logits)
    full = torch.zeros_like(batch.loss_mask)
    full[:, 1:] = (
        torch.log_softmax(logits[:, :-1], -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
        * batch.loss_mask[:, 1:]
    )
    reference = policy_loss(full, full.detach(), batch.per_token["a"], batch.loss_mask).loss
    assert torch.allclose(ours, reference, atol=1e-6)
    assert torch.allclose(logprobs, full, atol=1e-5)


def test_infra_errors_leave_the_batch() -> None:
    from agentic_rl.types import Trajectory, TrajectoryGroup

    good = [
        Trajectory(
            task_id="t", group_id="g", token_ids=[1, 2, 3], loss_mask=[0, 1, 1], sampler_logprobs=[0, 0, 0], reward=r
        )
        for r in (1.0, 0.0)
    ]
    broken = Trajectory(
        task_id="t", group_id="g", token_ids=[1, 2], loss_mask=[0, 1], sampler_logprobs=[0, 0], infra_error="boom"
    )
    config = _config()
    scored = score(
        [TrajectoryGroup("t", "g", [*good, broken])], config.algorithm, max_total_tokens=config.rollout.max_total_tokens
    )
    assert scored.excluded == 1
    assert len(scored.trajectories) == 2
    assert scored.advantages[0][0] == 0.0 and scored.advantages[0][1] > 0 > scored.advantages[1][1]


def test_overlong_shaping_lowers_rewards_near_the_limit() -> None:
    from agentic_rl.types import Trajectory, TrajectoryGroup

    config = _config(algorithm={"preset": "grpo-tcr"}, reward={"overlong_buffer": 10}, rollout={"max_total_tokens": 30})
    short = Trajectory(
        task_id="t", group_id="g", prompt_length=5, token_ids=[1] * 10, loss_mask=[0] * 5 + [1] * 5, reward=1.0
    )
    long = Trajectory(
        task_id="t", group_id="g", prompt_length=5, token_ids=[1] * 25, loss_mask=[0] * 5 + [1] * 20, reward=1.0
    )
    scored = score(
        [TrajectoryGroup("t", "g", [short, long])],
        config.algorithm,
        max_total_tokens=config.rollout.max_total_tokens,
        reward=config.reward,
    )
    # room 25, buffer 10: 5 tokens -> 0; 20 tokens -> (15 - 20) / 10 = -0.5
    assert scored.rewards.tolist() == pytest.approx([1.0, 0.5])
    # A prompt that alone fills the limit (the episode ended before sampling): no room, no shaping, no crash.
    full = Trajectory(task_id="t", group_id="g", prompt_length=40, token_ids=[1] * 40, loss_mask=[0] * 40, reward=0.0)
    scored = score(
        [TrajectoryGroup("t", "g", [full, full])],
        config.algorithm,
        max_total_tokens=config.rollout.max_total_tokens,
        reward=config.reward,
    )
    assert scored.rewards.tolist() == [0.0, 0.0]


def test_kl_reference_copy_and_multiple_updates(tiny) -> None:
    trainer = _trainer(tiny, _config(algorithm={"preset": "grpo"}, rl={"epochs": 2, "mini_batches": 2}))
    assert (
        trainer.reference is not None
        and not trainer.reference.adapters_disabled
        and trainer.reference.model is not trainer.model
    )
    reference = {n: p.detach().clone() for n, p in trainer.reference.model.named_parameters()}
    first, _ = trainer.step()
    second, _ = trainer.step()
    # Later mini-batches run after earlier updates: the policy has left the reference.
    assert first["kl"] > 0 and second["kl"] > 0
    assert second["ratio_mean"] != 1.0
    assert all(torch.equal(p, reference[n]) for n, p in trainer.reference.model.named_parameters())


def test_lora_trains_adapters_only_and_uses_disabled_adapters_as_reference(tiny) -> None:
    from agentic_rl.models.lora import apply_lora

    model, tokenizer = tiny
    config = _config(lora={"enabled": True, "r": 4, "alpha": 8}, algorithm={"preset": "grpo"})
    peft_model = apply_lora(copy.deepcopy(model), config.lora)
    trainer = RLTrainer(config, peft_model, tokenizer, HFBackend(peft_model, tokenizer), ParityEnv, list(range(8)))
    assert (
        trainer.reference.adapters_disabled and trainer.reference.model is peft_model
    )  # the base with adapters off, no copy
    frozen = {n: p.detach().clone() for n, p in peft_model.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    trainer.step()
    trainer.step()
    assert all(torch.equal(p, frozen[n]) for n, p in peft_model.named_parameters() if n in frozen)
    assert any(not torch.equal(p, adapters[n]) for n, p in peft_model.named_parameters() if n in adapters)


@pytest.mark.parametrize(
    ("setting", "precision", "policy_logprobs", "correction", "expected"),
    [
        ("auto", "fp32", True, "none", "sampler"),  # the in-process engine samples with the trainer's weights
        ("auto", "bf16-mixed", True, "tis", "recompute"),
        ("auto", "fp32", False, "tis", "recompute"),  # vLLM, Ray workers, an engine's own copy
        ("auto", "fp32", False, "none", "recompute"),  # a scripted or remote engine, correction forced off
        ("recompute", "fp32", True, "none", "recompute"),
        ("sampler", "fp32", False, "none", "sampler"),  # explicit: the ratio against the sampling policy
    ],
)
def test_old_logprobs_come_from_the_sampler_only_where_its_numbers_are_the_trainers(
    setting, precision, policy_logprobs, correction, expected
) -> None:
    from agentic_rl.algorithms import resolve_old_logprobs

    assert (
        resolve_old_logprobs(setting, precision=precision, policy_logprobs=policy_logprobs, correction=correction)
        == expected
    )


def test_old_logprobs_sampler_beside_a_correction_is_refused() -> None:
    from agentic_rl.algorithms import resolve_old_logprobs

    with pytest.raises(
        ValueError,
        match=r"^algorithm.old_logprobs: sampler would make algorithm.correction.kind tis compare the sampler with itself",
    ):
        resolve_old_logprobs("sampler", precision="fp32", policy_logprobs=False, correction="tis")


def test_sampler_logprobs_as_old_give_the_recomputed_update_without_its_forward_pass(tiny, monkeypatch) -> None:
    """Two mini-batches: reusing the sampler's log-probs as the pre-update ones updates the
    weights as the recomputing trainer does (same batch, same seed), and skips that pass.
    Recomputing forwards only the second mini-batch's rows: the first update's policy is
    the pre-update one, so it reads its own log-probs."""
    trainers = {
        mode: _trainer(tiny, _config(rl={"mini_batches": 2, "steps": 1}, algorithm={"old_logprobs": mode}))
        for mode in ("recompute", "auto")
    }
    assert {mode: trainer.old_logprobs for mode, trainer in trainers.items()} == {
        "recompute": "recompute",
        "auto": "sampler",
    }
    passes: list[list[int]] = []
    monkeypatch.setattr(
        PolicyUpdate,
        "_old_logprobs",
        lambda self, scored, members: passes.append(list(members)) or original(self, scored, members),
    )
    results = {}
    for mode, trainer in trainers.items():
        passes.clear()
        metrics, _ = trainer.step()
        results[mode] = (metrics, dict(trainer.model.named_parameters()), list(passes))
    (recomputed, weights, recompute_passes), (reused, reused_weights, reuse_passes) = (
        results["recompute"],
        results["auto"],
    )
    assert len(recompute_passes) == 1 and reuse_passes == []
    order = torch.randperm(16, generator=torch.Generator().manual_seed(trainers["recompute"].config.seed)).tolist()
    assert recompute_passes[0] and set(recompute_passes[0]) <= set(order[1::2])  # the second mini-batch's rows only
    assert (
        recomputed["frac_zero_std_groups"] < 1.0 and recomputed["ratio_mean"] != 1.0
    )  # the second update did move the ratio
    assert reused["ratio_mean"] == pytest.approx(recomputed["ratio_mean"], abs=1e-4)
    # the sampler-vs-trainer gap stays measured (on the first update) and is float noise here
    assert 0.0 <= reused["rollout_logprob_diff_max"] < 1e-3
    for name, value in weights.items():
        torch.testing.assert_close(reused_weights[name], value, atol=1e-5, rtol=1e-4)


original = PolicyUpdate._old_logprobs


def test_skipping_zero_advantage_trajectories_updates_the_weights_as_the_full_batch(tiny, monkeypatch) -> None:
    """skip_zero_advantage (the default) leaves the groups whose samples scored alike out
    of the forward and backward passes: two mini-batches (so the pre-update log-probs
    matter) update the weights as the full batch does, from fewer forwarded trajectories.
    A batch with no advantage left still steps the optimizer (Adam's momentum moves the
    weights) exactly as the full batch's zero gradient does."""
    forwarded: list[int] = []
    collate_ = PolicyUpdate._collate
    monkeypatch.setattr(
        PolicyUpdate,
        "_collate",
        lambda self, scored, members, old: forwarded.extend(members) or collate_(self, scored, members, old),
    )
    results = {}
    for skip in (False, True):
        trainer = _trainer(
            tiny, _config(rl={"mini_batches": 2, "steps": 2, "group_size": 2, "skip_zero_advantage": skip})
        )
        assert trainer.skip_zero_advantage is skip
        forwarded.clear()
        metrics, _ = trainer.step()
        results[skip] = (trainer, metrics, sorted(forwarded))
    (full, full_metrics, full_rows), (skipping, metrics, rows) = results[False], results[True]
    assert 0.0 < metrics["frac_zero_std_groups"] < 1.0, "the batch needs both kinds of group"
    assert full_rows == list(range(8)) and full_metrics["zero_advantage_skipped"] == 0.0
    assert len(rows) == 8 * (1 - metrics["frac_zero_std_groups"]) and metrics[
        "zero_advantage_skipped"
    ] == pytest.approx(metrics["frac_zero_std_groups"])
    assert metrics["grad_norm"] == pytest.approx(full_metrics["grad_norm"], rel=1e-4)
    for (name, value), other in zip(full.model.named_parameters(), skipping.model.parameters()):
        torch.testing.assert_close(
            other, value, atol=1e-5, rtol=1e-4, msg=name
        )  # Adam divides float noise by tiny second moments
    # a batch whose advantages are all zero: nothing forwarded, the optimizer steps as before
    groups, kept, _ = full._sample()
    before = [p.detach().clone() for p in full.model.parameters()]
    for trainer in (full, skipping):
        scored, _, _ = trainer.score_groups(kept, groups)
        scored.advantages = [[0.0] * len(row) for row in scored.advantages]
        forwarded.clear()
        zero = trainer.update(scored)
    assert forwarded == [] and zero["zero_advantage_skipped"] == 1.0
    for (name, value), other, _old in zip(full.model.named_parameters(), skipping.model.parameters(), before):
        torch.testing.assert_close(
            other, value, atol=1e-5, rtol=1e-4, msg=name
        )  # Adam divides float noise by tiny second moments
    assert any(not torch.equal(value, old) for value, old in zip(full.model.parameters(), before))


@pytest.mark.parametrize("algorithm", [{"kl": {"coef": 0.05}}, {"policy_loss": "kl-cov"}, {"preset": "ppo"}])
def test_zero_advantage_trajectories_stay_where_a_loss_term_reads_them(tiny, algorithm) -> None:
    """A KL loss, a covariance-selected loss and a critic all read trajectories whose
    advantage is zero: there every trajectory is forwarded."""
    trainer = _trainer(tiny, _config(rl={"steps": 1}, algorithm=algorithm))
    assert trainer.skip_zero_advantage is False
    metrics, _ = trainer.step()
    assert metrics["zero_advantage_skipped"] == 0.0


@pytest.mark.parametrize("preset", ["dr-grpo", "grpo", "grpo-tcr"])
def test_the_policy_loss_gets_the_configured_aggregation(tiny, monkeypatch, preset) -> None:
    """algorithm.aggregation reaches the policy loss (it is not one of the loss's own
    parameters under policy_loss, whose signature default would otherwise apply)."""
    import agentic_rl.training.rl_loss as rl_loss

    seen = []
    real = rl_loss.compute_policy_loss

    def spy(name, *inputs, **params):
        seen.append(params["aggregation"])
        return real(name, *inputs, **params)

    monkeypatch.setattr(rl_loss, "compute_policy_loss", spy)
    config = _config(algorithm={"preset": preset}, rl={"steps": 1, "skip_zero_advantage": False})
    _trainer(tiny, config).step()
    assert seen and set(seen) == {config.algorithm.aggregation}

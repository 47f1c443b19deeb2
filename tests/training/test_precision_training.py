"""bf16-mixed training on the tiny model: float32 master weights take updates that pure
bf16 weights lose, bf16 log-probs stay close to float32 ones, the bf16 rollout copy is
synced in place, and the trainer corrects for the sampler's precision."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.accel import head_logprobs
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.hf import HFBackend
from agentic_rl.models.precision import set_compute_precision
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.optim import make_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")

BF16_LOGPROB_TOLERANCE = 0.01
"""Max |log p_bf16 - log p_fp32| on the tiny model. bf16 keeps 8 significant bits (each
product rounds by up to 2^-9 relative); the logits are upcast before the log-softmax, so
the error is the rounding of a 2-layer forward, measured at ~2e-3 here on log-probs of
magnitude ~11. 0.01 leaves 5x room while still failing if the logits themselves were
kept in bf16 (their rounding alone is ~0.02 at that magnitude)."""


def _batch(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 1000, (4, 48), generator=generator)
    select = torch.zeros_like(input_ids)
    select[:, 16:] = 1
    advantages = torch.randn(4, 48, generator=generator)
    return input_ids, torch.ones_like(input_ids), select, advantages


def _one_step(model, lr: float = 1e-6) -> dict[str, torch.Tensor]:
    """One AdamW step of a policy-gradient loss; each parameter's change, in float32."""
    input_ids, attention_mask, select, advantages = _batch()
    optimizer = make_optimizer(model.parameters(), lr=lr)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    logprobs, _ = token_logprobs(model, input_ids, attention_mask, select)
    (-(logprobs * advantages * select).sum() / select.sum()).backward()
    optimizer.step()
    return {name: p.detach().float() - before[name].float() for name, p in model.named_parameters()}


def _fraction(predicate, deltas: dict[str, torch.Tensor]) -> float:
    return sum(int(predicate(d).sum()) for d in deltas.values()) / sum(d.numel() for d in deltas.values())


def test_bf16_mixed_keeps_the_updates_that_pure_bf16_weights_lose(tiny) -> None:
    """At lr 1e-6 an update is ~1e-4 of a weight of size 0.02: below bf16's resolution
    (2^-8 relative). Float32 master weights with bf16 compute take the same update as a
    float32 step; bf16 weights round most updates away. Adam's first step moves each
    weight by +-lr (m / sqrt(v) = sign(g)), so the two float32-master updates differ only
    where bf16 rounding flips the sign of a near-zero gradient."""
    model, _ = tiny
    fp32 = _one_step(copy.deepcopy(model))
    mixed_model = copy.deepcopy(model)
    set_compute_precision(mixed_model, "bf16-mixed")
    mixed = _one_step(mixed_model)
    pure = _one_step(copy.deepcopy(model).to(torch.bfloat16))

    assert all(p.dtype == torch.float32 for p in mixed_model.parameters())
    assert _fraction(lambda d: d != 0, fp32) > 0.999
    assert _fraction(lambda d: d != 0, mixed) > 0.999
    assert _fraction(lambda d: d != 0, pure) < 0.05  # measured: 1.8% of the bf16 weights moved
    same_direction = sum(int((torch.sign(fp32[n]) == torch.sign(mixed[n])).sum()) for n in fp32) / sum(
        d.numel() for d in fp32.values()
    )
    assert same_direction > 0.99  # measured: 99.9%
    mean_difference = sum(float((fp32[n] - mixed[n]).abs().sum()) for n in fp32) / sum(d.numel() for d in fp32.values())
    assert mean_difference < 0.01 * 1e-6  # measured: 0.0025 lr


def test_bf16_logprobs_agree_with_float32(tiny) -> None:
    model, _ = tiny
    input_ids, attention_mask, select, _ = _batch(1)
    mixed = copy.deepcopy(model)
    set_compute_precision(mixed, "bf16-mixed")
    with torch.no_grad():
        reference, reference_entropy = token_logprobs(model, input_ids, attention_mask, select, with_entropy=True)
        logprobs, entropy = token_logprobs(mixed, input_ids, attention_mask, select, with_entropy=True)
    assert logprobs.dtype == entropy.dtype == torch.float32
    error = float((logprobs - reference).abs().max())
    assert 0 < error < BF16_LOGPROB_TOLERANCE  # non-zero: the forward really ran in bf16
    assert float((entropy - reference_entropy).abs().max()) < BF16_LOGPROB_TOLERANCE


def test_chunked_head_under_autocast_matches_the_plain_head(tiny) -> None:
    """The chunked vocabulary head's bf16 path (float32 logits per chunk, float32 gradient
    sums) gives the values and gradients of autocast's plain ``lm_head(h).float()`` path."""
    model, _ = tiny
    head = copy.deepcopy(model.lm_head)
    generator = torch.Generator().manual_seed(2)
    hidden = torch.randn(40, head.in_features, generator=generator, requires_grad=True)
    targets = torch.randint(0, head.out_features, (40,), generator=generator)
    weights = torch.randn(40, generator=generator)
    results = []
    for plain in (False, True):
        head.zero_grad()
        hidden.grad = None
        handle = head.register_forward_hook(lambda *args: None) if plain else None  # a hooked head takes the plain path
        with torch.autocast("cpu", dtype=torch.bfloat16):
            picked, entropy = head_logprobs(head, hidden, targets, temperature=0.7, with_entropy=True)
        (picked * weights).sum().backward()
        if handle is not None:
            handle.remove()
        results.append((picked.detach(), entropy, hidden.grad.clone(), head.weight.grad.clone()))
    (chunked, plain) = results
    assert chunked[0].dtype == torch.float32 and chunked[3].dtype == torch.float32
    for ours, theirs in zip(chunked, plain):
        torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-3)


def test_bf16_engine_copy_is_synced_in_place(tiny) -> None:
    model, tokenizer = tiny
    master = copy.deepcopy(model)
    backend = HFBackend(master, tokenizer, weights_dtype=torch.bfloat16)
    assert backend.separate_weights and backend.weights_dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in master.parameters())
    master_storage = {p.data_ptr() for p in master.parameters()}
    assert not master_storage & {p.data_ptr() for p in backend.model.parameters()}
    # Buffers keep their dtype: the rotary frequencies stay float32.
    assert all(b.dtype == torch.float32 for b in backend.model.buffers() if b.is_floating_point())
    pointers = [p.data_ptr() for p in backend.model.parameters()]
    with torch.no_grad():
        for parameter in master.parameters():
            parameter.add_(0.01)
    assert backend.sync_weights() == 1
    assert [p.data_ptr() for p in backend.model.parameters()] == pointers  # in place, no new allocation
    for ours, theirs in zip(backend.model.parameters(), master.parameters()):
        assert torch.equal(ours, theirs.detach().to(torch.bfloat16))
    shared = HFBackend(master, tokenizer)
    assert not shared.separate_weights and shared.model is master


def test_bf16_engine_samples_log_probs_close_to_the_trainer(tiny) -> None:
    model, tokenizer = tiny
    master = copy.deepcopy(model)
    backend = HFBackend(master, tokenizer, weights_dtype=torch.bfloat16)
    prompts = [tokenizer("Hello there, how are", add_special_tokens=False)["input_ids"]] * 2
    completions = backend.generate(
        prompts, SamplingParams(temperature=1.0, max_new_tokens=10, seed=3), stop_token_ids=[]
    )
    assert all(len(c.token_ids) == 10 for c in completions)
    for prompt, completion in zip(prompts, completions):
        ids = torch.tensor([prompt + completion.token_ids])
        select = torch.zeros_like(ids)
        select[0, len(prompt) :] = 1
        with torch.no_grad():
            trainer, _ = token_logprobs(master, ids, torch.ones_like(ids), select)
        difference = (trainer[0, len(prompt) :] - torch.tensor(completion.logprobs)).abs()
        assert 0 < float(difference.max()) < 5 * BF16_LOGPROB_TOLERANCE  # bf16 weights and bf16 activations


class ParityEnv:
    """One turn; reward 1 for a reply of even length: random text gets both outcomes."""

    num_tasks = 8

    def reset(self, *, seed=None, options=None):
        index = (options or {}).get("task_index", 0)
        return [{"role": "user", "content": f"Task {index}: say something."}], {"task_id": f"parity-{index}"}

    def step(self, message):
        reward = float(len(message["content"]) % 2 == 0)
        return [], reward, True, False, {"answer": message["content"], "correct": reward > 0, "tool_results": []}


def _rl_trainer(tiny, precision: str, **algorithm):
    from agentic_rl.config import TrainConfig
    from agentic_rl.training.rl import RLTrainer

    model, tokenizer = tiny
    master = copy.deepcopy(model)
    set_compute_precision(master, precision)
    config = TrainConfig.model_validate(
        {
            "model": {"name": "tiny-random", "device": "cpu"},
            "precision": precision,
            "rollout": {"max_new_tokens": 12, "max_total_tokens": 512},
            "rl": {"steps": 2, "tasks_per_step": 2, "group_size": 4},
            "optim": {"lr": 1e-3},
            "algorithm": algorithm,
        }
    )
    backend = HFBackend(master, tokenizer, weights_dtype=torch.bfloat16 if precision == "bf16-mixed" else None)
    return RLTrainer(config, master, tokenizer, backend, ParityEnv, list(range(ParityEnv.num_tasks)))


def test_fp32_trainer_sharing_the_engine_needs_no_correction(tiny) -> None:
    trainer = _rl_trainer(tiny, "fp32")
    assert trainer.rollout_correction == "none"
    metrics, _ = trainer.step()
    # The engine samples from the trainer's own float32 weights: only kernel rounding differs.
    assert metrics["rollout_logprob_diff_max"] < 1e-3
    assert metrics["rollout_is_weight_mean"] == 1.0 and metrics["rollout_is_truncated_frac"] == 0.0


def test_bf16_mixed_trainer_corrects_for_the_bf16_sampler(tiny) -> None:
    trainer = _rl_trainer(tiny, "bf16-mixed")
    assert trainer.rollout_correction == "tis"
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics, _ = trainer.step()
    assert 0 < metrics["rollout_logprob_diff_mean"] < 5 * BF16_LOGPROB_TOLERANCE
    assert metrics["rollout_logprob_diff_max"] >= metrics["rollout_logprob_diff_mean"]
    assert metrics["rollout_kl_k3"] >= 0
    assert 0.9 < metrics["rollout_is_weight_mean"] <= 2.0
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    # The bf16 engine copy follows the master after the update.
    for ours, theirs in zip(trainer.backend.model.parameters(), trainer.model.parameters()):
        assert torch.equal(ours, theirs.detach().to(torch.bfloat16))
    assert trainer.backend.weight_version == 1


def test_masked_correction_is_selectable(tiny) -> None:
    trainer = _rl_trainer(tiny, "bf16-mixed", correction={"kind": "mis", "low": 0.999, "high": 1.001})
    assert trainer.rollout_correction == "mis"
    metrics, _ = trainer.step()
    # bf16 rounding moves some ratios (measured: up to 0.2%) out of a +-0.1% band: those tokens leave the loss.
    assert 0 < metrics["rollout_is_masked_frac"] < 1
    assert metrics["rollout_is_weight_mean"] == pytest.approx(1 - metrics["rollout_is_masked_frac"])


def test_sft_under_bf16_mixed_trains_the_float32_masters(tiny) -> None:
    from agentic_rl.config import SFTConfig
    from agentic_rl.training.sft import train_sft

    model, tokenizer = tiny
    master = copy.deepcopy(model)
    set_compute_precision(master, "bf16-mixed")
    examples = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} + {i}?"},
                {"role": "assistant", "content": f"<answer>{2 * i}</answer>"},
            ]
        }
        for i in range(8)
    ]
    result = train_sft(master, tokenizer, examples, SFTConfig(epochs=3, lr=3e-3, batch_size=8, warmup_steps=0))
    assert all(p.dtype == torch.float32 for p in master.parameters())
    assert result.losses[-1] < result.losses[0]

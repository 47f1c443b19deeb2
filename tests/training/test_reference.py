"""The KL reference: fp32, bf16 and CPU copies of the initial policy, and what auto picks."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.models.precision import set_compute_precision
from agentic_rl.training.batch import collate
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.reference import ReferencePolicy, resolve_kl_reference

pytestmark = pytest.mark.usefixtures("one_thread")

BF16_TOLERANCE = 0.02
"""Largest |log p_bf16 - log p_fp32| accepted for the tiny model. bf16 keeps 8 significant
bits (relative rounding up to 2^-9); the tiny model's logits stay below 1.5 in magnitude,
so rounding the weights, activations and logits moves each log-prob by a few 1e-3
(0.0024 measured); 0.02 leaves room for other CPUs' summation orders while still catching
a real error (a wrong token or position moves a log-prob by ~1)."""


@pytest.fixture(scope="module")
def batch(tokenizer):
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, len(tokenizer), (n,), generator=generator).tolist() for n in (40, 25, 33)]
    return collate(rows, [[0] * 5 + [1] * (len(r) - 5) for r in rows], pad_token_id=tokenizer.pad_token_id)


def _policy_logprobs(model, batch, temperature: float = 0.7) -> torch.Tensor:
    with torch.no_grad():
        return token_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask, temperature=temperature)[0]


def _build(model, placement: str) -> ReferencePolicy:
    return ReferencePolicy.build(model, lora_enabled=False, kl_needed=True, placement=placement)


@pytest.mark.parametrize("placement", ["fp32", "bf16", "cpu"])
def test_reference_logprobs_equal_the_initial_policy(tiny, batch, placement) -> None:
    model = tiny[0]
    expected = _policy_logprobs(model, batch)
    got = _build(model, placement).logprobs(batch, 0.7)
    assert got.dtype == torch.float32 and got.device == expected.device
    if placement == "bf16":
        difference = float((got - expected).abs().max())
        assert 0 < difference < BF16_TOLERANCE  # nonzero: the copy really computes in bf16
    else:
        assert torch.equal(got, expected)


@pytest.mark.parametrize("placement", ["fp32", "bf16", "cpu"])
def test_reference_copy_is_frozen_placed_and_shares_no_storage(tiny, placement) -> None:
    model = tiny[0]
    reference = _build(model, placement).model
    policy_storage = {p.untyped_storage().data_ptr() for p in [*model.parameters(), *model.buffers()]}
    parameters = dict(reference.named_parameters(remove_duplicate=False))
    assert parameters.keys() == dict(model.named_parameters(remove_duplicate=False)).keys()
    for name, parameter in parameters.items():
        assert parameter.dtype == (torch.bfloat16 if placement == "bf16" else torch.float32), name
        assert parameter.device.type == "cpu" and not parameter.requires_grad, name
        assert parameter.untyped_storage().data_ptr() not in policy_storage, name
    assert all(b.untyped_storage().data_ptr() not in policy_storage for b in reference.buffers())
    # Tied embeddings stay one tensor; rotary tables keep float32.
    assert reference.lm_head.weight is reference.model.embed_tokens.weight
    assert {b.dtype for b in reference.buffers()} == {torch.float32}
    assert not reference.training
    assert all(p.dtype == torch.float32 and p.requires_grad for p in model.parameters())  # the policy untouched


@pytest.mark.parametrize("placement", ["fp32", "bf16", "cpu"])
def test_a_policy_update_does_not_move_the_reference(tiny, batch, placement) -> None:
    model = copy.deepcopy(tiny[0])
    reference = _build(model, placement)
    before = reference.logprobs(batch, 1.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask)
    (-logprobs.sum()).backward()
    optimizer.step()
    assert not torch.equal(_policy_logprobs(model, batch, 1.0), before)  # the policy moved
    assert torch.equal(reference.logprobs(batch, 1.0), before)
    assert all(p.grad is None for p in reference.model.parameters())


def test_auto_resolves_by_the_run_precision() -> None:
    assert resolve_kl_reference("auto", "bf16-mixed") == "bf16"
    assert resolve_kl_reference("auto", "fp32") == "fp32"
    for setting in ("fp32", "bf16", "cpu"):
        assert resolve_kl_reference(setting, "bf16-mixed") == resolve_kl_reference(setting, "fp32") == setting
    with pytest.raises(ValueError, match="algorithm.kl.reference"):
        resolve_kl_reference("fp16", "fp32")


def test_lora_reference_is_the_policy_whatever_the_placement(tiny) -> None:
    model = tiny[0]
    for placement in ("fp32", "bf16", "cpu"):
        reference = ReferencePolicy.build(model, lora_enabled=True, kl_needed=True, placement=placement)
        assert reference.model is model and reference.adapters_disabled
    assert ReferencePolicy.build(model, lora_enabled=False, kl_needed=False, placement="bf16") is None


def test_trainer_places_the_reference_by_config_and_precision(tiny) -> None:
    from test_rl_trainer import _config, _trainer

    dtypes = {}
    for setting, precision in [("auto", "fp32"), ("auto", "bf16-mixed"), ("bf16", "fp32"), ("fp32", "bf16-mixed")]:
        model = copy.deepcopy(tiny[0])
        set_compute_precision(model, precision)
        trainer = _trainer((model, tiny[1]), _config(algorithm={"preset": "grpo", "kl": {"reference": setting}}))
        dtypes[setting, precision] = next(trainer.reference.model.parameters()).dtype
    assert dtypes == {
        ("auto", "fp32"): torch.float32,
        ("auto", "bf16-mixed"): torch.bfloat16,
        ("bf16", "fp32"): torch.bfloat16,
        ("fp32", "bf16-mixed"): torch.float32,
    }

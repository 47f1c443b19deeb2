"""The lean Llama-family forward equals transformers' forward over the same slot cache."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from agentic_rl.accel import decoder_for, native, native_build
from agentic_rl.accel.lean import lean_decoder
from agentic_rl.accel.onednn import onednn_available, packed_weights, set_linear_kernel
from agentic_rl.anatomy import split_model
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.hf import HFBackend
from agentic_rl.engines.kv_cache import SlotCache
from agentic_rl.engines.sampling import inverse_cdf
from agentic_rl.models.copies import frozen_copy

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")
needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}")
# The lean forward's products run on the native kernels where it builds, else on oneDNN: test both.
KERNELS = [
    pytest.param(False, id="onednn"),
    pytest.param(
        True,
        id="native",
        marks=pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}"),
    ),
]


def _run(backbone, forward, prompts: torch.Tensor, steps: int, ragged: bool = False) -> list[torch.Tensor]:
    """Prefill ``prompts`` [B, T] into a fresh slot cache, then ``steps`` one-token steps
    (feeding token id 7 + step); returns the hidden states of each pass. ``ragged``: row b
    continues from T - 2b cached tokens (its later entries are stale and masked), so the
    decode steps see rows of different lengths."""
    batch, width = prompts.shape
    cache = SlotCache(
        backbone.config, slots=batch, capacity=width + steps, dtype=torch.float32, device=torch.device("cpu")
    )
    outputs = []
    lengths = torch.zeros(batch, dtype=torch.long)
    ids = prompts
    for _ in range(steps + 1):
        q = ids.shape[1]
        positions = lengths[:, None] + torch.arange(q)
        total = int(lengths.max()) + q
        mask = (torch.arange(total)[None, None, :] <= positions[:, :, None])[:, None]
        cache.bind(0, batch, positions, total)
        outputs.append(forward(ids, positions, mask, cache))
        lengths += q
        if ragged and len(outputs) == 1:
            lengths -= 2 * torch.arange(batch)
        ids = torch.full((batch, 1), 7 + len(outputs))
    return outputs


def _lean_and_reference(model, prompts: torch.Tensor, steps: int, ragged: bool, native: bool):
    """(lean decoder, its hidden states, transformers' hidden states) over the same passes."""
    backbone, lm_head = split_model(model)

    def reference(ids, positions, mask, cache):
        return backbone(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        ).last_hidden_state

    with torch.no_grad(), packed_weights(model):
        lean = lean_decoder(backbone, lm_head, native=native)
        assert lean is not None and lean.native == native
        expected = _run(backbone, reference, prompts, steps=steps, ragged=ragged)
        got = _run(backbone, lean.forward, prompts, steps=steps, ragged=ragged)
        # The head joins the kernel (else the caller runs the module): the same logits.
        logits = lean.logits(got[-1])
        assert (logits is not None) == native
        if native:
            torch.testing.assert_close(logits, lm_head(got[-1]), rtol=1e-4, atol=1e-5)
    return lean, got, expected


@needs_onednn
@pytest.mark.parametrize("native", KERNELS)
@pytest.mark.parametrize("ragged", [False, True])
def test_lean_forward_matches_transformers(tiny, ragged, native) -> None:
    model, _ = tiny
    backbone, _ = split_model(model)
    prompts = torch.randint(3, 500, (3, 9), generator=torch.Generator().manual_seed(0))
    _, got, expected = _lean_and_reference(model, prompts, steps=4, ragged=ragged, native=native)
    assert (
        [g.shape for g in got]
        == [e.shape for e in expected]
        == [(3, 9, backbone.config.hidden_size)] + [(3, 1, backbone.config.hidden_size)] * 4
    )
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def _qwen2(head_dim: int, kv_heads: int, heads: int = 3):
    """A tiny Qwen2 (q/k/v biases, grouped-query heads) with float32 weights on oneDNN."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=300,
        hidden_size=heads * head_dim,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0, 0.5)
    set_linear_kernel(model, "onednn")
    return model


@needs_onednn
@pytest.mark.parametrize("native", KERNELS)
def test_lean_forward_matches_transformers_with_projection_biases(native) -> None:
    """Qwen2 has q/k/v biases: they follow the reordered, scaled q/k rows."""
    model = _qwen2(head_dim=16, kv_heads=2, heads=4)
    prompts = torch.randint(3, 300, (2, 6), generator=torch.Generator().manual_seed(1))
    lean, got, expected = _lean_and_reference(model, prompts, steps=3, ragged=True, native=native)
    assert lean.layers[0].qkv_bias is not None
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@needs_onednn
def test_lean_forward_only_where_covered(tiny) -> None:
    model, _ = tiny
    backbone, _ = split_model(model)
    assert lean_decoder(backbone) is not None
    plain = copy.deepcopy(model)
    set_linear_kernel(plain, "torch")  # the user kept torch's kernels: not overridden
    assert lean_decoder(split_model(plain)[0]) is None
    other = copy.deepcopy(model)
    other.config.model_type = "gpt_neox"
    assert lean_decoder(split_model(other)[0]) is None
    wrapped = copy.deepcopy(model)
    layer = split_model(wrapped)[0].layers[0].self_attn
    layer.q_proj = torch.nn.Sequential(layer.q_proj)  # e.g. an adapter around a projection
    assert lean_decoder(split_model(wrapped)[0]) is None
    other_rope = copy.deepcopy(model)
    backbone = split_model(other_rope)[0]
    rotary = backbone.rotary_emb

    class HalvesDiffer(torch.nn.Module):  # tables not of the rotate-half form cat(freqs, freqs)
        def forward(self, x, positions):
            cos, sin = rotary(x, positions)
            half = cos.shape[-1] // 2
            return torch.cat([cos[..., :half], cos[..., :half].flip(-1)], -1), torch.cat(
                [sin[..., :half], sin[..., :half].flip(-1)], -1
            )

    backbone.rotary_emb = HalvesDiffer()
    assert lean_decoder(backbone) is None


@needs_onednn
def test_missing_compiler_falls_back_to_onednn_with_one_warning(tiny, monkeypatch, tmp_path, caplog) -> None:
    """No compiler (``CXX`` names no executable, nothing cached): one logged warning, no
    error, and the lean forward runs on oneDNN with transformers' results."""
    model, _ = tiny
    backbone, _ = split_model(model)
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv("AGENTIC_RL_NATIVE", raising=False)
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(native_build, "check_machine", lambda: None)  # reach the compiler on any CPU
    prompts = torch.randint(3, 500, (2, 7), generator=torch.Generator().manual_seed(2))

    def reference(ids, positions, mask, cache):
        return backbone(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        ).last_hidden_state

    with caplog.at_level(logging.INFO, logger=native.__name__), torch.no_grad(), packed_weights(model):
        lean = decoder_for(model)
        assert lean is not None and lean.native is False and lean.logits(torch.zeros(1, 1)) is None
        got = _run(backbone, lean.forward, prompts, steps=3, ragged=True)
        expected = _run(backbone, reference, prompts, steps=3, ragged=True)
        assert not native.available() and decoder_for(model).native is False  # asked again: no second build or log
    records = [r for r in caplog.records if r.name == native.__name__]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert (
        "no C++ compiler found (CXX=" in records[0].getMessage() and "decoding uses oneDNN" in records[0].getMessage()
    )
    assert native.unavailable_reason().startswith("no C++ compiler found (CXX=")
    assert not (tmp_path / "kernels").exists()  # nothing built or cached
    with pytest.raises(RuntimeError, match="not available: no C\\+\\+ compiler"):
        native.PackedLinear(torch.randn(2, 2))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@needs_onednn
def test_rollouts_equal_with_and_without_the_lean_forward(tiny, monkeypatch) -> None:
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer)
    prompts = [[1, 5, 9, 200, 17], [1, 5, 301, 44], [1, 5, 9, 200, 17]]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3)
    fast = backend.generate(prompts, sampling, stop_token_ids=[])
    monkeypatch.setattr("agentic_rl.engines.decode_session.decoder_for", lambda model: None)
    slow = backend.generate(prompts, sampling, stop_token_ids=[])
    assert [c.token_ids for c in fast] == [c.token_ids for c in slow]
    for a, b in zip(fast, slow):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-4)


def _bf16_products(model):
    """A float32 copy of ``model`` that computes what the lean forward of its bf16 copy
    does: weights holding the bf16 values, each linear layer's input rounded to bf16, all
    else float32 (the reference for decoding bf16 weights)."""
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in rounded.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
    for module in rounded.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(lambda _, args: (args[0].to(torch.bfloat16).float(),))
    return rounded


@needs_onednn
@needs_native
@pytest.mark.parametrize(
    "shape",
    [
        pytest.param("tiny", id="llama-scaling-exact"),
        pytest.param((32, 1), id="qwen2-biases-scaling-inexact"),  # 1/sqrt(32): the forward scales the queries
    ],
)
def test_bf16_weights_decode_as_bf16_products_in_a_float32_forward(tiny, shape) -> None:
    """A bf16 rollout copy runs the lean forward with bf16 products and float32 everything
    else: its hidden states and logits are those of a float32 model holding the bf16
    weights' values whose linear layers round their inputs to bf16."""
    model = tiny[0] if shape == "tiny" else _qwen2(*shape)
    bf16 = frozen_copy(model, dtype=torch.bfloat16)
    reference_model = _bf16_products(model)
    backbone, lm_head = split_model(bf16)
    reference_backbone, reference_head = split_model(reference_model)
    lean = lean_decoder(backbone, lm_head)
    assert lean is not None and lean.native and lean.cache_dtype == torch.float32
    assert (lean.layers[0].query_scale is None) == (shape == "tiny")

    def reference(ids, positions, mask, cache):
        return reference_backbone(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        ).last_hidden_state

    prompts = torch.randint(3, 300, (3, 7), generator=torch.Generator().manual_seed(4))
    unrounded = copy.deepcopy(reference_model)  # the same weights, inputs not rounded: a negative control
    for module in unrounded.modules():
        module._forward_pre_hooks.clear()
    unrounded_backbone = split_model(unrounded)[0]

    def control(ids, positions, mask, cache):
        return unrounded_backbone(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        ).last_hidden_state

    with torch.no_grad():
        got = _run(backbone, lean.forward, prompts, steps=3, ragged=True)
        expected = _run(reference_backbone, reference, prompts, steps=3, ragged=True)
        controls = _run(unrounded_backbone, control, prompts, steps=3, ragged=True)
        # Equal up to float32 rounding, except where that rounding flips an input's bf16
        # rounding (an ulp of bf16, rare: the mean stays two orders below the control's).
        for g, e, c in zip(got, expected, controls):
            assert g.dtype == torch.float32
            torch.testing.assert_close(g, e, rtol=0, atol=5e-3)
            assert (g - e).abs().mean() < 1e-4 < 5e-4 < (g - c).abs().mean()
        torch.testing.assert_close(lean.logits(got[-1]), reference_head(expected[-1]), rtol=1e-4, atol=1e-4)


@needs_onednn
@needs_native
def test_bf16_rollouts_equal_the_reference_forward_of_their_products(tiny, monkeypatch) -> None:
    """Sampling from a bf16 copy (HFBackend weights_dtype) decodes on the lean forward with a
    float32 cache: the same tokens and log-probs as transformers' forward of the reference."""
    model, tokenizer = tiny
    prompts = [[1, 5, 9, 200, 17], [1, 5, 301, 44], [1, 5, 9, 200, 17]]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3)
    backend = HFBackend(model, tokenizer, weights_dtype=torch.bfloat16)
    got = backend.generate(prompts, sampling, stop_token_ids=[])
    assert backend.model.dtype == torch.bfloat16
    monkeypatch.setattr("agentic_rl.engines.decode_session.decoder_for", lambda model: None)  # hooks run
    expected = HFBackend(_bf16_products(model), tokenizer).generate(prompts, sampling, stop_token_ids=[])
    assert [c.token_ids for c in got] == [c.token_ids for c in expected]
    for a, b in zip(got, expected):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-4)


@needs_onednn
def test_bf16_weights_need_the_native_kernels_and_a_plain_head(tiny) -> None:
    backbone, lm_head = split_model(frozen_copy(tiny[0], dtype=torch.bfloat16))
    assert lean_decoder(backbone, lm_head, native=False) is None  # oneDNN would round the activations too
    assert lean_decoder(backbone, torch.nn.Sequential(lm_head)) is None  # a head the kernel cannot take
    assert lean_decoder(backbone, lm_head) is not None or not native.available()


@pytest.mark.parametrize("vocab", [1000, 1024])  # padded to the block size, or whole blocks
def test_inverse_cdf_matches_a_full_cumulative_sum(vocab: int) -> None:
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(64, vocab, generator=generator) ** 8
    probs[:, ::7] = 0.0  # zero-probability entries are never chosen
    probs /= probs.sum(-1, keepdim=True)
    uniform = torch.rand(64, generator=generator, dtype=torch.float64)
    cdf = probs.double().cumsum(-1)
    expected = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True).squeeze(-1)
    chosen = inverse_cdf(probs, uniform)
    assert torch.equal(chosen, expected)
    assert bool((probs.gather(-1, chosen[:, None]) > 0).all())
    # u -> 1 lands on the last positive entry, u = 0 on the first.
    edge = inverse_cdf(probs[:2], torch.tensor([1.0 - 1e-16, 0.0], dtype=torch.float64))
    assert probs[0, edge[0]] > 0 and int(edge[1]) == int((probs[1] > 0).nonzero()[0])

"""Attention routes around two slow paths of PyTorch's ``sdpa`` kernels in training forwards.

CPU, bf16 (bf16-mixed training): PyTorch's CPU flash-attention backward runs bf16 with a
large fixed cost per call, so for short rows it is several times slower than its float32
backward (SmolLM2-135M's shapes, 16 rows x 9 heads, forward + backward of one layer on a
2-core AMX Xeon: 13 vs 4 ms at 64 tokens, 48 vs 25 ms at 180; level at 300; bf16 ahead
at 500: ``benchmarks/attention_backward.py``). A CPU forward that will be
backpropagated, of at most ``FLOAT32_ATTENTION_MAX_TOKENS`` tokens, computes its
attention in float32 (the q/k/v projections stay bf16). Forwards without gradients
(scoring, evaluation) keep bf16, whose forward is twice as fast.

CUDA, float32: transformers' ``sdpa`` asks PyTorch for grouped-query attention (``enable_gqa``) when no
mask is passed; on CUDA only the flash kernel takes that flag, and flash has no float32,
so a float32 forward falls to the math kernel, which keeps the [heads, L, L] attention
probabilities of every layer for the backward. Measured on an H200 (SmolLM2-135M, 512-token
rows): 9 MiB per row and layer saved, the update's peak 1.3-1.4x the plan at 2k-8k tokens,
and quadratic in the row length. Repeating the key/value heads first lets the
memory-efficient kernel (which has float32, and keeps no probabilities) run instead.
bf16 forwards, decoding (one query token) and other devices keep transformers' path.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

NAME = "agentic-rl-sdpa"
"""The attention implementation ``route_attention`` registers."""


def ungroup_here(query: torch.Tensor) -> bool:
    """Whether a forward with ``query`` [B, heads, L, D] repeats its key/value heads."""
    return query.is_cuda and query.dtype == torch.float32 and query.shape[2] > 1


LOW_PRECISION = (torch.bfloat16, torch.float16)

FLOAT32_ATTENTION_MAX_TOKENS = 256
"""The longest rows whose CPU training attention runs in float32 (see above)."""


def float32_here(query: torch.Tensor) -> bool:
    """Whether a forward with ``query`` [B, heads, L, D] computes its attention in float32:
    a CPU forward of 2 to ``FLOAT32_ATTENTION_MAX_TOKENS`` tokens that will be
    backpropagated, in bf16/fp16 or under a bf16/fp16 autocast (which would run ``sdpa``
    in bf16: rotary embeddings leave the queries float32, autocast casts them back)."""
    if query.device.type != "cpu" or not 1 < query.shape[2] <= FLOAT32_ATTENTION_MAX_TOKENS:
        return False
    if not query.requires_grad:
        return False
    autocast = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") in LOW_PRECISION
    return query.dtype in LOW_PRECISION or autocast


def _attention(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    if float32_here(query):
        dtype = query.dtype
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.float()
        with torch.autocast("cpu", enabled=False):
            output, weights = sdpa_attention_forward(
                module, query.float(), key.float(), value.float(), attention_mask, **kwargs
            )
        return output.to(dtype), weights
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1 and ungroup_here(query):
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
        # transformers reads only these two attributes of the module.
        module = SimpleNamespace(num_key_value_groups=1, is_causal=getattr(module, "is_causal", True))
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def route_attention(model) -> None:
    """Route ``model``'s ``sdpa`` attention through ``_attention`` (other implementations,
    e.g. eager or flash, are left alone)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return
    AttentionInterface.register(NAME, _attention)
    # Masks are looked up by the same name, and a name without one gets no mask at all.
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(NAME)
    else:  # transformers before 4.57 reads the name from the config at each forward
        model.config._attn_implementation = NAME

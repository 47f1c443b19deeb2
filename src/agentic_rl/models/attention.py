"""Attention for float32 training forwards on CUDA with grouped-query models, without the
quadratic fallback.

transformers' ``sdpa`` asks PyTorch for grouped-query attention (``enable_gqa``) when no
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
"""The attention implementation ``use_ungrouped_fp32_attention`` registers."""


def ungroup_here(query: torch.Tensor) -> bool:
    """Whether a forward with ``query`` [B, heads, L, D] repeats its key/value heads."""
    return query.is_cuda and query.dtype == torch.float32 and query.shape[2] > 1


def _attention(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1 and ungroup_here(query):
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
        # transformers reads only these two attributes of the module.
        module = SimpleNamespace(num_key_value_groups=1, is_causal=getattr(module, "is_causal", True))
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def use_ungrouped_fp32_attention(model) -> None:
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

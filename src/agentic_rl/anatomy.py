"""Where a causal LM's parts are: its backbone and vocabulary head, and the backbone's
last hidden states for a batch (a shared prompt prefix encoded once).

Training (log-probs, the critic) and rollout (the decode session, the lean forward) all
take a model apart the same way; these helpers are that one way.
"""

from __future__ import annotations

import torch


def split_model(model):
    """(backbone, lm_head) of a causal LM, also through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    return backbone, base.get_output_embeddings()


def cache_argument(backbone, cache) -> dict:
    """The KV cache as the backbone's forward takes it: transformers 5.x renamed
    ``past_key_values`` to ``cache`` (the old name warns, then goes in 5.40)."""
    import inspect

    forward = inspect.signature(type(backbone).forward).parameters
    return {"cache": cache} if "cache" in forward else {"past_key_values": cache}


MIN_SHARED_PREFIX = 32
"""Shared prompt prefixes at least this long are encoded once per micro-batch."""


def _shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, target: torch.Tensor) -> int:
    """Length of the token prefix all rows share, ending before any position whose
    hidden state a selected token needs."""
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
    length = int(same.long().cumprod(0).sum())
    if target.any():
        first_needed = int(target.float().argmax(1)[target.any(1)].min()) - 1
        length = min(length, first_needed)
    return length if length >= MIN_SHARED_PREFIX else 0


def _sharded(backbone) -> bool:
    """Whether FSDP2 shards the backbone's layers."""
    from torch.distributed.fsdp import FSDPModule

    layers = getattr(backbone, "layers", None)
    return bool(layers) and isinstance(layers[0], FSDPModule)


def hidden_states(
    backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """Last hidden states and the column they start at: ``input_ids``, ``attention_mask``,
    ``target`` (the positions whose tokens a loss reads) [B, T] -> ([B, T - prefix, H], prefix).

    Rows of a batch usually share a long prompt prefix (system prompt, tool list). It is
    encoded once and its KV cache, expanded to every row, feeds the rest: gradients flow
    back through the shared cache, so the result and its gradient equal a full forward
    pass, at a fraction of the cost.
    """
    # Under activation checkpointing transformers drops the KV cache inside each layer, so
    # the prefix would silently vanish from the suffix's context: run the full pass then.
    checkpointing = getattr(backbone, "gradient_checkpointing", False) and backbone.training
    # FSDP2 frees a layer's gathered weights after its backward: a second forward of the
    # same layers in one pass (the prefix, then the rest) would find them gone.
    prefix = 0 if checkpointing or _sharded(backbone) else _shared_prefix_length(input_ids, attention_mask, target)
    if not prefix:
        return backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, 0
    from transformers import DynamicCache

    cache = DynamicCache(config=backbone.config)
    passed = cache_argument(backbone, cache)  # the signature looked up once per call, not per pass
    backbone(input_ids=input_ids[:1, :prefix], use_cache=True, **passed)
    cache.batch_repeat_interleave(input_ids.shape[0])
    width = input_ids.shape[1]
    positions = torch.arange(prefix, width, device=input_ids.device).expand(input_ids.shape[0], -1)
    hidden = backbone(
        input_ids=input_ids[:, prefix:], attention_mask=attention_mask, position_ids=positions, use_cache=True, **passed
    ).last_hidden_state
    return hidden, prefix

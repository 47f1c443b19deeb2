"""Log-probabilities of the tokens in a batch, computed only where the loss needs them.

The backbone runs over every position, but the vocabulary projection and log-softmax
(the largest tensors for small models: T x 49k) run only at the selected positions.
"""

from __future__ import annotations

import torch


def _split_model(model):
    """(backbone, lm_head) of a causal LM, also through a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    return backbone, base.get_output_embeddings()


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    select: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of token t given tokens < t, for every t where ``select[b, t]`` is set.

    Shapes: ``input_ids``, ``attention_mask``, ``select``: [B, T]. Returns ``logprobs``
    [B, T] (zero where not selected) and, if asked, the entropy of the predictive
    distribution at those positions [B, T]. Position 0 is never selected (it has no
    context). ``temperature`` divides the logits, as the sampler did.
    """
    backbone, lm_head = _split_model(model)
    # Token t is predicted from the hidden state at t - 1.
    target = select.bool().clone()
    target[:, 0] = False
    rows, cols = target.nonzero(as_tuple=True)
    hidden, offset = _hidden_states(backbone, input_ids, attention_mask, target)
    logits = lm_head(hidden[rows, cols - 1 - offset]).float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, input_ids[rows, cols].unsqueeze(-1)).squeeze(-1)
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    out = out.index_put((rows, cols), picked)
    entropy = None
    if with_entropy:
        values = -(log_probs.exp() * log_probs).sum(-1)
        entropy = torch.zeros(input_ids.shape, dtype=values.dtype, device=values.device).index_put((rows, cols), values.detach())
    return out, entropy


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


def _hidden_states(backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Last hidden states and the column they start at.

    Rows of a batch usually share a long prompt prefix (system prompt, tool list). It is
    encoded once and its KV cache, expanded to every row, feeds the rest: gradients flow
    back through the shared cache, so the result and its gradient equal a full forward
    pass, at a fraction of the cost.
    """
    # Under activation checkpointing transformers drops the KV cache inside each layer, so
    # the prefix would silently vanish from the suffix's context: run the full pass then.
    checkpointing = getattr(backbone, "gradient_checkpointing", False) and backbone.training
    prefix = 0 if checkpointing else _shared_prefix_length(input_ids, attention_mask, target)
    if not prefix:
        return backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, 0
    from transformers import DynamicCache

    cache = DynamicCache(config=backbone.config)
    backbone(input_ids=input_ids[:1, :prefix], past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(input_ids.shape[0])
    width = input_ids.shape[1]
    positions = torch.arange(prefix, width, device=input_ids.device).expand(input_ids.shape[0], -1)
    hidden = backbone(
        input_ids=input_ids[:, prefix:], attention_mask=attention_mask, position_ids=positions, past_key_values=cache, use_cache=True
    ).last_hidden_state
    return hidden, prefix

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
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    # Token t is predicted from the hidden state at t - 1.
    target = select.bool().clone()
    target[:, 0] = False
    rows, cols = target.nonzero(as_tuple=True)
    logits = lm_head(hidden[rows, cols - 1]).float()
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

"""Log-probabilities of the tokens in a batch, computed only where the loss needs them.

The backbone runs over every position, but the vocabulary projection and log-softmax
(the largest tensors for small models: T x 49k) run only at the selected positions, in
vocabulary chunks (accel.head_logprobs).
"""

from __future__ import annotations

import torch

from agentic_rl.accel import head_logprobs
from agentic_rl.anatomy import hidden_states, split_model
from agentic_rl.models.precision import compute_autocast

__all__ = ["PolicyLogprobs", "head_logprobs", "token_logprobs"]


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
    context). ``temperature`` divides the logits, as the sampler did. The forward runs in
    the model's compute precision (models/precision.py); the log-probs are float32.
    """
    backbone, lm_head = split_model(model)
    # Token t is predicted from the hidden state at t - 1.
    target = select.bool().clone()
    target[:, 0] = False
    rows, cols = target.nonzero(as_tuple=True)
    with compute_autocast(model):
        hidden, offset = hidden_states(backbone, input_ids, attention_mask, target)
        picked, values = head_logprobs(
            lm_head,
            hidden[rows, cols - 1 - offset],
            input_ids[rows, cols],
            temperature=temperature,
            with_entropy=with_entropy,
        )
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    out = out.index_put((rows, cols), picked)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(input_ids.shape, dtype=values.dtype, device=values.device).index_put(
            (rows, cols), values.detach()
        )
    return out, entropy


class PolicyLogprobs(torch.nn.Module):
    """``token_logprobs`` of ``model`` as a module forward: the root a trainer strategy wraps
    (DDP, FSDP2), so the wrappers' hooks see the whole trainable computation (embedding,
    decoder layers, the vocabulary head) in one call."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        select: torch.Tensor,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ):
        return token_logprobs(
            self.model, input_ids, attention_mask, select, temperature=temperature, with_entropy=with_entropy
        )

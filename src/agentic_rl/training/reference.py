"""The reference policy the KL term pulls towards: the initial policy, frozen."""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from agentic_rl.training.batch import TokenBatch
from agentic_rl.training.logprobs import token_logprobs


@dataclass(frozen=True, eq=False)
class ReferencePolicy:
    """Log-probs under the initial weights. ``model`` is a frozen deep copy of the initial
    policy, or (``adapters_disabled``) the LoRA policy itself run with its adapters
    switched off: the base weights never train and the adapters start at zero, so the
    base is the initial policy without a second copy in memory."""

    model: nn.Module
    adapters_disabled: bool = False

    @classmethod
    def build(cls, model: nn.Module, *, lora_enabled: bool, kl_needed: bool) -> ReferencePolicy | None:
        """None when no KL term needs one; call it before the first update (the copy is
        taken of ``model`` as it is now)."""
        if not kl_needed:
            return None
        if lora_enabled:
            return cls(model, adapters_disabled=True)
        frozen = copy.deepcopy(model).eval()
        for parameter in frozen.parameters():
            parameter.requires_grad_(False)
        return cls(frozen)

    def logprobs(self, batch: TokenBatch, temperature: float) -> torch.Tensor:
        """Log-probs [B, T] of ``batch``'s tokens at its loss positions (0 elsewhere), without gradients."""
        adapters_off = self.model.disable_adapter() if self.adapters_disabled else nullcontext()
        with torch.no_grad(), adapters_off:
            logprobs, _ = token_logprobs(self.model, batch.input_ids, batch.attention_mask, batch.loss_mask, temperature=temperature)
        return logprobs

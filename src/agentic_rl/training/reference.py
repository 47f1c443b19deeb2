"""The reference policy the KL term pulls towards: the initial policy, frozen."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from agentic_rl.models.copies import frozen_copy
from agentic_rl.training.batch import TokenBatch
from agentic_rl.training.logprobs import token_logprobs

PLACEMENTS = ("fp32", "bf16", "cpu")
"""Where and in which dtype the reference copy lives: an exact copy on the policy's device
(float32, as the master weights are), a bf16 copy there (half the memory), or an exact
copy on the CPU (no accelerator memory; each reference forward moves its batch there)."""


def resolve_kl_reference(setting: str, precision: str) -> str:
    """The placement (fp32, bf16, cpu) that ``algorithm.kl.reference`` ``setting`` means for a run in
    ``precision`` (fp32 or bf16-mixed): auto = bf16 for bf16-mixed runs, whose forwards
    already round to bf16, else fp32."""
    if setting == "auto":
        return "bf16" if precision == "bf16-mixed" else "fp32"
    if setting not in PLACEMENTS:
        raise ValueError(f"algorithm.kl.reference: expected auto or one of {', '.join(PLACEMENTS)}, got {setting!r}")
    return setting


@dataclass(frozen=True, eq=False)
class ReferencePolicy:
    """Log-probs under the initial weights. ``model`` is a frozen copy of the initial
    policy (placed by ``PLACEMENTS``), or (``adapters_disabled``) the LoRA policy itself
    run with its adapters switched off: the base weights never train and the adapters
    start at zero, so the base is the initial policy without a second copy in memory."""

    model: nn.Module
    adapters_disabled: bool = False
    forward: Callable | None = None
    """With adapters disabled: the policy's forward as the trainer strategy runs it (a sharded
    policy cannot run outside its wrapper); None: ``token_logprobs`` of ``model``."""

    @classmethod
    def build(
        cls, model: nn.Module, *, lora_enabled: bool, kl_needed: bool, placement: str = "fp32"
    ) -> ReferencePolicy | None:
        """None when no KL term needs one; call it before the first update (the copy is
        taken of ``model`` as it is now). ``placement``: fp32, bf16 or cpu (see
        :func:`resolve_kl_reference`); with LoRA there is no copy to place."""
        if placement not in PLACEMENTS:
            raise ValueError(f"placement: expected one of {', '.join(PLACEMENTS)}, got {placement!r}")
        if not kl_needed:
            return None
        if lora_enabled:
            return cls(model, adapters_disabled=True)
        return cls(
            frozen_copy(
                model,
                dtype=torch.bfloat16 if placement == "bf16" else None,
                device="cpu" if placement == "cpu" else None,
            )
        )

    def logprobs(self, batch: TokenBatch, temperature: float) -> torch.Tensor:
        """Log-probs [B, T] of ``batch``'s tokens at its loss positions (0 elsewhere), without
        gradients, float32 (the vocabulary head upcasts a bf16 copy's logits) on ``batch``'s device."""
        adapters_off = self.model.disable_adapter() if self.adapters_disabled else nullcontext()
        # A CPU copy of a GPU policy: the batch goes to the copy and its log-probs come back.
        device = next(self.model.parameters()).device
        run = self.forward or functools.partial(token_logprobs, self.model)
        with torch.no_grad(), adapters_off:
            logprobs, _ = run(
                batch.input_ids.to(device),
                batch.attention_mask.to(device),
                batch.loss_mask.to(device),
                temperature=temperature,
            )
        return logprobs.to(batch.input_ids.device)

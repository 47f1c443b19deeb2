"""Frozen copies of a model in another dtype or on another device (rollout weights, the KL
reference), made without a second full copy at the original precision."""

from __future__ import annotations

import copy

import torch
from torch import nn


def frozen_copy(
    model: nn.Module, *, dtype: torch.dtype | None = None, device: torch.device | str | None = None
) -> nn.Module:
    """A gradient-free copy of ``model`` in eval mode, its floating-point parameters in
    ``dtype`` and everything on ``device`` (None: as they are).

    Each parameter is copied straight into its target dtype and device (the deepcopy memo
    hands the copy those tensors), so no second float32 copy exists on the way to a bf16
    or a CPU one; parameters shared within ``model`` (tied embeddings) stay shared in the
    copy. Buffers keep their dtype: rotary frequency tables must stay float32."""
    memo = {}
    for parameter in model.parameters():
        target = dtype if dtype is not None and parameter.is_floating_point() else parameter.dtype
        memo[id(parameter)] = nn.Parameter(
            parameter.detach().to(device=device, dtype=target, copy=True), requires_grad=False
        )
    frozen = copy.deepcopy(model, memo)
    if device is not None:
        frozen.to(device)  # the buffers; the parameters are there already
    return frozen.eval()

"""Reward shaping on tensors."""

from __future__ import annotations

import torch
from torch import Tensor


def overlong_penalty(lengths: Tensor, max_length: int, buffer: int) -> Tensor:
    """DAPO soft overlong punishment per trajectory: lengths [B] -> penalty [B] (float).

    0 when L <= max_length - buffer; a linear ramp (max_length - buffer - L) / buffer
    while max_length - buffer < L <= max_length; -1 when L > max_length.
    ``buffer=0`` switches the shaping off (all zeros).
    """
    if not 0 <= buffer <= max_length:
        raise ValueError(f"overlong buffer must be in [0, max_length={max_length}], got {buffer}")
    lengths = lengths.to(torch.get_default_dtype()) if not lengths.is_floating_point() else lengths
    if buffer == 0:
        return torch.zeros_like(lengths)
    start = max_length - buffer
    ramp = ((start - lengths) / buffer).clamp(max=0.0)
    return torch.where(lengths > max_length, torch.full_like(lengths, -1.0), ramp)

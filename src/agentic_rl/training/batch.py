"""Collating token sequences into padded tensors (right padding: no cache in training)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class TokenBatch:
    """``input_ids``/``attention_mask``/``loss_mask`` are [B, T]; ``per_token`` holds any
    extra per-token float tensors by name ([B, T], e.g. sampler logprobs, advantages)
    aligned with ``input_ids`` (position t describes token t)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    per_token: dict[str, torch.Tensor]

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.loss_mask.to(device),
            {k: v.to(device) for k, v in self.per_token.items()},
        )

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())


def collate(
    token_ids: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    per_token: dict[str, Sequence[Sequence[float]]] | None = None,
) -> TokenBatch:
    """Right-pad sequences to the longest one; padding gets attention 0 and loss 0.
    ``per_token`` rows (one float per token) become ``TokenBatch.per_token`` tensors."""
    if len(token_ids) != len(loss_masks):
        raise ValueError("token_ids and loss_masks differ in length")
    width = max(len(ids) for ids in token_ids)
    batch = len(token_ids)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    loss_mask = torch.zeros((batch, width), dtype=torch.float32)
    extra = {name: torch.zeros((batch, width), dtype=torch.float32) for name in (per_token or {})}
    for row, (ids, mask) in enumerate(zip(token_ids, loss_masks)):
        if len(ids) != len(mask):
            raise ValueError(f"sequence {row}: {len(ids)} tokens but {len(mask)} mask values")
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
        loss_mask[row, : len(ids)] = torch.tensor(mask, dtype=torch.float32)
        for name, rows in (per_token or {}).items():
            extra[name][row, : len(ids)] = torch.tensor(rows[row], dtype=torch.float32)
    return TokenBatch(input_ids, attention_mask, loss_mask, extra)


def padding_batch(pad_token_id: int, per_token: Sequence[str] = ()) -> TokenBatch:
    """A two-token micro-batch with one loss position: data-parallel ranks with fewer
    micro-batches than the busiest run it (its loss scaled by zero), so that every rank
    enters the wrappers' collective forwards and backwards as often."""
    return collate(
        [[pad_token_id, pad_token_id]],
        [[0, 1]],
        pad_token_id=pad_token_id,
        per_token={name: [[0.0, 0.0]] for name in per_token},
    )


MICRO_BATCH_OVERHEAD_TOKENS = {"fp32": 64, "bf16-mixed": 192}
"""The fixed cost of one more forward/backward pass, counted in padded tokens, by the
model's compute precision (~30 layers x dozens of kernel launches each way, and under
bf16 autocast the weights cast again: about 0.3-0.5 s on a 2-core CPU). Measured with
``benchmarks/micro_batch_cost.py`` (SmolLM2-135M, 2-core AMX Xeon): fp32 0.33 s + 4.2 ms
a token (78 tokens), bf16-mixed 0.31-0.34 s + 1.45-1.52 ms a token (213-225 tokens)."""


def micro_batch_overhead(precision: str) -> int:
    """:data:`MICRO_BATCH_OVERHEAD_TOKENS` of a compute precision (fp32's for any other)."""
    return MICRO_BATCH_OVERHEAD_TOKENS.get(precision, MICRO_BATCH_OVERHEAD_TOKENS["fp32"])


def length_buckets(
    lengths: Sequence[int],
    max_tokens: int,
    max_sequences: int,
    *,
    overhead_tokens: int = MICRO_BATCH_OVERHEAD_TOKENS["fp32"],
) -> list[list[int]]:
    """Group indices into micro-batches of similar length, each within ``max_tokens``
    padded tokens and ``max_sequences`` rows (a longer single sequence gets its own).

    The split minimises padded tokens plus ``overhead_tokens`` per micro-batch, exactly
    (dynamic programming over the lengths in sorted order, where an optimal bucket is
    always a contiguous run): one batch when lengths are close, separate ones when a few
    long rows would pad many short ones.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    ordered = [lengths[i] for i in order]
    n = len(order)
    best = [0.0] + [float("inf")] * n
    start = [0] * (n + 1)
    for end in range(1, n + 1):  # the last bucket is ordered[first:end], padded to ordered[end - 1]
        width = ordered[end - 1]
        for first in range(end - 1, -1, -1):
            rows = end - first
            if rows > 1 and (rows > max_sequences or width * rows > max_tokens):
                break
            cost = best[first] + width * rows + overhead_tokens
            if cost < best[end]:
                best[end], start[end] = cost, first
    buckets: list[list[int]] = []
    end = n
    while end:
        buckets.append(order[start[end] : end])
        end = start[end]
    return buckets[::-1]


def keyed_length_buckets(
    keys: Sequence[Hashable],
    lengths: Sequence[int],
    max_tokens: int,
    max_sequences: int,
    *,
    overhead_tokens: int = MICRO_BATCH_OVERHEAD_TOKENS["fp32"],
) -> list[tuple[Hashable, list[int]]]:
    """``(key, bucket)``: :func:`length_buckets` within each key's indices (keys in the
    order first seen), so that no micro-batch mixes keys (e.g. the LoRA adapters of roles)."""
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return [
        (key, [members[j] for j in bucket])
        for key, members in groups.items()
        for bucket in length_buckets(
            [lengths[i] for i in members], max_tokens, max_sequences, overhead_tokens=overhead_tokens
        )
    ]

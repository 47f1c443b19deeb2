"""Sampling next tokens on the device, with counter-based randomness.

Each draw is a pure function of ``(stream seed, token position)``: a sequence samples the
same tokens whether it decodes alone, in a batch of 32, or in a continuously batched
session where other sequences come and go. That is what makes seeded rollouts
reproducible under continuous batching (the order of events there depends on tool
latency) and lets a per-turn batched run and a continuous one be compared token for token.
"""

from __future__ import annotations

import torch

_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)  # splitmix64 constants as signed int64
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (wrapping arithmetic), elementwise."""
    x = x + _GOLDEN
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


def counter_uniform(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Uniform draws in [0, 1) as float64, one per element of ``seeds``/``positions`` ([N] int64)."""
    bits = _splitmix64(_splitmix64(seeds) + positions)
    return _shift_right(bits, 11).double() * (1.0 / (1 << 53))


def entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """[N] entropy (nats) of softmax(logits / T) for logits [N, V]; greedy decoding reports the T=1 entropy."""
    log_probs = torch.log_softmax(_tempered(logits, temperature if temperature > 0 else 1.0), -1)
    return -(log_probs.exp() * log_probs).sum(-1)


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T, without the pass over [N, vocabulary] when T is 1 (the usual RL setting)."""
    return logits if temperature == 1.0 else logits / temperature


def sample(
    logits: torch.Tensor, *, temperature: float, top_p: float, seeds: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens [N] and their log-probs [N] from logits [N, V].

    ``seeds`` and ``positions`` ([N] int64) pick each row's random draw. The log-prob is the
    policy's at this temperature, taken before top-p truncation: it is what the trainer's
    forward pass reproduces (top-p only narrows what is drawn). Temperature 0 is greedy and
    reports the temperature-1 log-prob.
    """
    if temperature <= 0:
        chosen = logits.argmax(-1)
        return chosen, torch.log_softmax(logits, -1).gather(-1, chosen[:, None]).squeeze(-1)
    # Softmax once; the chosen tokens' log-probs are logs of their probabilities (they were
    # drawn, so far from float32 underflow): one pass over [N, vocabulary] less than log_softmax + exp.
    probs = full = torch.softmax(_tempered(logits, temperature), -1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(-1, descending=True)
        # Drop a token once the mass before it already reaches top_p (the first always stays).
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    chosen = inverse_cdf(probs, counter_uniform(seeds, positions).to(probs.device))
    return chosen, full.gather(-1, chosen[:, None]).squeeze(-1).log()


def top_logprobs(logits: torch.Tensor, *, temperature: float, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most likely tokens [N, k] and their log-probs [N, k] (most likely first) under
    the distribution :func:`sample` reports log-probs of: softmax at the temperature, before
    top-p; temperature 1 when greedy. Computed exactly as ``sample`` computes the sampled
    token's, so the first entry is never below the sampled token's log-prob and equals it
    when that token is the most likely one. A pass over [N, vocabulary] that sampling
    without alternatives does not pay."""
    k = min(int(k), logits.shape[-1])
    if temperature <= 0:
        values, ids = torch.log_softmax(logits, -1).topk(k, -1)
        return ids, values
    values, ids = torch.softmax(_tempered(logits, temperature), -1).topk(k, -1)
    return ids, values.log()


_BLOCK = 256


def inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Index [N] where the cumulative mass of ``probs`` [N, V] first exceeds ``uniform``
    [N] x the row's total: one uniform per row instead of multinomial's V exponentials
    (those were a tenth of a decode step at vocabulary 49k).

    Two levels: the block of 256 entries holding the target by a cumulative sum over
    block masses, then the entry inside that block; a full-length cumulative sum cost
    ~3 ms per batch-16 step. Block masses are float32 sums of 256 entries (a float64 copy
    of the whole [N, V] was ~1 ms); the cumulative sums run in float64, so the smallest
    probabilities stay resolvable. A zero-probability entry (cut by top-p) is never returned."""
    rows, vocab = probs.shape
    blocks = -(-vocab // _BLOCK)
    padded = probs if vocab == blocks * _BLOCK else torch.nn.functional.pad(probs, (0, blocks * _BLOCK - vocab))
    padded = padded.reshape(rows, blocks, _BLOCK)
    block_cdf = padded.sum(-1).double().cumsum(-1)
    target = uniform.double() * block_cdf[:, -1]
    block = torch.searchsorted(block_cdf, target[:, None], right=True).squeeze(-1).clamp_(max=blocks - 1)
    before = torch.where(
        block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)[:, None]).squeeze(-1), torch.zeros_like(target)
    )
    inner = padded[torch.arange(rows, device=probs.device), block].double()
    inner_cdf = inner.cumsum(-1)
    index = torch.searchsorted(inner_cdf, (target - before)[:, None], right=True).squeeze(-1)
    # Rounding between the two sums can put the target past the block's last entry (or a
    # trailing zero): fall back to the block's last positive entry.
    last_positive = torch.where(inner > 0, torch.arange(_BLOCK, device=probs.device), -1).amax(-1)
    index = torch.minimum(index, last_positive.clamp(min=0))
    return (block * _BLOCK + index).clamp_(max=vocab - 1)

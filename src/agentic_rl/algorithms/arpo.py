"""ARPO (Agentic Reinforced Policy Optimization, Dong et al. 2025): pure functions.

ARPO samples a few global trajectories per task, then branches extra partial rollouts at
tool-call points where the policy's entropy rose above the episode's initial entropy.
Branches share their prefix with the trajectory they branched from, which raises the
question of what advantage the shared tokens get:

* soft attribution: plain GRPO over all trajectories of the task, branches included (a
  shared token appears once per trajectory that contains it, each time with that
  trajectory's advantage);
* hard attribution (:func:`hard_attribution`): each shared token gets the mean advantage
  of the trajectories that share it, distinct tokens keep their own.

Shapes: ``B`` trajectories, ``T`` padded token positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def normalized_entropy(entropies: list[float], k: int, vocab_size: int) -> float | None:
    """Mean entropy of the first ``k`` sampled tokens divided by log(vocab_size), in [0, 1].

    ``entropies``: per-token entropies (nats) of one assistant turn. None for an empty turn.
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    first = entropies[:k]
    if not first:
        return None
    return sum(first) / len(first) / math.log(vocab_size)


def branch_probability(entropy_increase: float, *, base_probability: float = 0.5, entropy_weight: float = 0.2) -> float:
    """P = clip(alpha + beta * dH, 0, 1): the chance to branch at a tool-call point.

    ``entropy_increase`` is dH = H_t - H_initial with both entropies normalized by
    log(vocab size) (so dH lies in [-1, 1]); alpha is ``base_probability`` (the paper's
    threshold 0.5, used as the released code does: branch when a uniform draw falls
    below alpha + beta * dH) and beta is ``entropy_weight`` (paper: 0.2).
    """
    return min(1.0, max(0.0, base_probability + entropy_weight * entropy_increase))


def hard_attribution(advantages: Tensor, common_prefix: Tensor) -> Tensor:
    """Hard advantage attribution over a branched batch -> Tensor[B, T].

    ``advantages``: [B, T] per-token advantages (e.g. GRPO's, 0 at unsampled positions).
    ``common_prefix``: [B, B] long; ``common_prefix[a, b]`` is how many leading tokens
    trajectories a and b share (their branch structure; ``common_prefix[b, b]`` is b's
    length, 0 between unrelated trajectories).

    Token t of trajectory b is shared by S(b, t) = {a : common_prefix[a, b] > t}, which
    always contains b; it gets mean_{a in S(b, t)} advantages[a, t]. A token nobody else
    shares keeps its own advantage, so with no branches this is the identity.
    """
    if common_prefix.shape != (advantages.shape[0], advantages.shape[0]):
        raise ValueError(f"common_prefix must be [B, B] = {[advantages.shape[0]] * 2}, got {list(common_prefix.shape)}")
    positions = torch.arange(advantages.shape[1], device=advantages.device)
    out = torch.empty_like(advantages)
    for row in range(advantages.shape[0]):  # one [B, T] mask at a time keeps memory at B*T
        shares = (common_prefix[:, row, None] > positions[None, :]).to(advantages.dtype)  # [B, T]
        counts = shares.sum(0)
        mean = (shares * advantages).sum(0) / counts.clamp(min=1)
        # Past b's own length nobody shares b's token (counts 0): keep its (padding) value.
        out[row] = torch.where(counts > 0, mean, advantages[row])
    return out


def common_prefix_lengths(lineages: list[list[tuple[str, int]]], ids: list[str], lengths: list[int]) -> Tensor:
    """[B, B] shared-prefix lengths from each trajectory's branch lineage.

    ``lineages[b]``: b's ancestors from its parent up to its root, each as
    ``(ancestor_id, tokens b shares with that ancestor)`` (empty for a global sample);
    ``ids[b]`` its own id and ``lengths[b]`` its token count. Two trajectories share
    min(what each shares with their nearest common ancestor); unrelated ones share 0.
    """
    shared_with = [{ids[b]: lengths[b], **dict(lineage)} for b, lineage in enumerate(lineages)]
    chains = [[ids[b]] + [ancestor for ancestor, _ in lineage] for b, lineage in enumerate(lineages)]
    size = len(ids)
    out = torch.zeros((size, size), dtype=torch.long)
    for a in range(size):
        for b in range(size):
            common = next((node for node in chains[a] if node in shared_with[b]), None)
            if common is not None:
                out[a, b] = min(shared_with[a][common], shared_with[b][common])
    return out

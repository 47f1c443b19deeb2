"""Rollout correction: importance weights between the policy the trainer computes and the
sampler that drew the tokens.

When the sampler is not the trainer (bf16 inference weights, another engine such as vLLM,
stale weights in async mode) the tokens come from a behaviour policy mu that differs from
the trainer's pre-update policy pi_old. The ratio pi_old / mu, applied to each token's
loss as a constant weight, corrects for it. Raw ratios have unbounded variance, so:

- ``tis`` (truncated IS; Yao et al., "Your efficient RL framework secretly brings you
  off-policy RL training"; slime): w_t = min(exp(lp_old_t - lp_mu_t), C);
- ``mis`` (masked IS; IcePop): w_t = 1 where the ratio lies in [low, high], else 0 (the
  token leaves the loss; the normalisers still count it);
- ``seq-tis`` / ``seq-mis``: the same on the sequence's geometric-mean ratio
  exp(mean_t(lp_old_t - lp_mu_t)), one weight for every token of the sequence;
- ``decoupled`` (AReaL's decoupled PPO, Fu et al. 2025: the behaviour policy mu samples,
  the trainer's pre-update policy is the proximal policy the clip is taken against):
  w_t = r_t where r_t = pi_old / mu <= C, else 0 (the token leaves the loss, as AReaL's
  ``behav_imp_weight_cap`` masks it);
- ``none``: w_t = 1 (the mismatch metrics are still reported).

Every policy loss of the registry is positively homogeneous in the advantage
(loss(A w) = w loss(A) for w >= 0), so the trainer applies the weights by scaling the
advantages, whichever loss is chosen. Shapes: ``B`` sequences x ``T`` positions; ``mask``
is the loss mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

ROLLOUT_CORRECTIONS = ("none", "tis", "mis", "seq-tis", "seq-mis", "decoupled")

_MAX_LOG_RATIO = 20.0
"""Log-ratios are clamped here before exponentiating (a stale token cannot overflow)."""


@dataclass
class CorrectionOutput:
    weights: Tensor
    """[B, T] importance weights (no gradient), 0 outside ``mask`` and where masked."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Mismatch and correction statistics over the masked tokens (python floats)."""


def mismatch_metrics(old_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the sampler is from the trainer on the sampled tokens: mean and max of
    |lp_old - lp_sampler|, and the k3 estimate of KL(sampler || old) (tokens are drawn from
    the sampler: k3 = r - 1 - log r with r = pi_old / mu, unbiased and non-negative)."""
    bool_mask = mask.to(torch.bool)
    if not bool(bool_mask.any()):
        return {"rollout_logprob_diff_mean": 0.0, "rollout_logprob_diff_max": 0.0, "rollout_kl_k3": 0.0}
    log_ratio = (old_logprobs - sampler_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)[bool_mask].double()
    return {
        "rollout_logprob_diff_mean": float(log_ratio.abs().mean()),
        "rollout_logprob_diff_max": float(log_ratio.abs().max()),
        "rollout_kl_k3": float((log_ratio.exp() - 1.0 - log_ratio).mean()),
    }


def rollout_correction(
    old_logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    *,
    mode: str,
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
) -> CorrectionOutput:
    """Importance weights of ``mode`` (see the module docstring) for ``old_logprobs`` (the
    trainer's pre-update log-probs), ``sampler_logprobs`` and ``mask``, all [B, T].

    Metrics: the :func:`mismatch_metrics`, and over masked tokens ``rollout_is_weight_mean``,
    ``rollout_is_truncated_frac`` (tis: the cap was applied) and ``rollout_is_masked_frac``
    (mis, decoupled: the token or its sequence was dropped)."""
    if mode not in ROLLOUT_CORRECTIONS:
        raise ValueError(f"rollout_correction: expected one of {', '.join(ROLLOUT_CORRECTIONS)}, got {mode!r}")
    if cap < 1.0 or not 0.0 <= low <= 1.0 <= high:
        raise ValueError(
            f"rollout_correction: need cap >= 1 and low <= 1 <= high, got cap={cap}, low={low}, high={high}"
        )
    with torch.no_grad():
        bool_mask = mask.to(torch.bool)
        mask = mask.to(old_logprobs.dtype)
        # torch.where, not a product with the mask: padding may hold -inf or nan log-probs
        # (inf * 0 = nan would leak into the weights and the sequence means).
        log_ratio = torch.where(bool_mask, old_logprobs - sampler_logprobs, torch.zeros_like(old_logprobs))
        log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        if mode.startswith("seq-"):
            # Geometric mean of the token ratios: exp of the mean log-ratio over the sequence's tokens.
            per_sequence = log_ratio.sum(-1) / mask.sum(-1).clamp(min=1.0)
            ratio = per_sequence.exp()[:, None].expand_as(log_ratio)
        else:
            ratio = log_ratio.exp()
        truncated = torch.zeros_like(mask, dtype=torch.bool)
        dropped = torch.zeros_like(mask, dtype=torch.bool)
        if mode == "none":
            weights = torch.ones_like(ratio)
        elif mode == "decoupled":
            dropped = ratio > cap
            weights = torch.where(dropped, torch.zeros_like(ratio), ratio)
        elif mode.endswith("tis"):
            truncated = ratio > cap
            weights = ratio.clamp(max=cap)
        else:
            dropped = (ratio < low) | (ratio > high)
            weights = (~dropped).to(ratio.dtype)
        weights = weights * mask
        tokens = bool_mask.sum().clamp(min=1)
        metrics = mismatch_metrics(old_logprobs, sampler_logprobs, mask)
        metrics.update(
            rollout_is_weight_mean=float(weights.sum() / tokens),
            rollout_is_truncated_frac=float((truncated & bool_mask).sum() / tokens),
            rollout_is_masked_frac=float((dropped & bool_mask).sum() / tokens),
        )
    return CorrectionOutput(weights=weights.detach(), metrics=metrics)


def resolve_rollout_correction(setting: str, *, precision: str, separate_sampler: bool) -> str:
    """The correction ``setting`` means for a run: ``auto`` is ``tis`` when the sampler's
    numbers can differ from the trainer's (``precision`` bf16-mixed, or a sampler with its own
    copy of the weights), else ``none``; any other setting is itself."""
    if setting == "auto":
        return "tis" if precision == "bf16-mixed" or separate_sampler else "none"
    if setting not in ROLLOUT_CORRECTIONS:
        raise ValueError(
            f"algorithm.correction.kind: expected auto or one of {', '.join(ROLLOUT_CORRECTIONS)}, got {setting!r}"
        )
    return setting


def resolve_old_logprobs(setting: str, *, precision: str, policy_logprobs: bool, correction: str) -> str:
    """Where a run's pre-update log-probs come from: ``sampler`` (the log-probs recorded with
    each sampled token) or ``recompute`` (one forward pass before the updates, over the
    rows the updates after the first read). ``auto`` reuses the sampler's exactly when they
    are the trainer's own numbers: the engine records its policy's log-probs with the
    trainer's weights (``policy_logprobs``, the in-process hf engine without a copy) at
    full precision. An explicit ``sampler`` makes the ratio the one against the sampling
    policy (verl's bypass mode); with a ``correction`` other than none that would weigh the
    sampler against itself."""
    if setting == "auto":
        return "sampler" if policy_logprobs and precision != "bf16-mixed" else "recompute"
    if setting == "sampler" and correction != "none":
        raise ValueError(
            f"algorithm.old_logprobs: sampler would make algorithm.correction.kind {correction} compare the sampler with itself; set algorithm.correction.kind none, or algorithm.old_logprobs recompute"
        )
    if setting not in ("sampler", "recompute"):
        raise ValueError(f"old_logprobs: expected auto, recompute or sampler, got {setting!r}")
    return setting

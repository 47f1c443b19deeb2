"""Policy losses (one registry) and the aggregation modes that turn per-token losses into
one number.

Every policy loss is ``fn(logprobs, old_logprobs, advantages, mask, *, aggregation,
num_tokens, num_sequences, norm_length, **params) -> PolicyLossOutput`` and is looked up
by name through :func:`compute_policy_loss`, so the trainer never branches on the loss.

Shapes: ``B`` sequences, ``T`` padded token positions; ``mask`` is 1 where the policy
sampled the token (the loss_mask).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from agentic_rl.algorithms.params import DualClip, LowerClip, UpperClip
from agentic_rl.algorithms.registry import Registry

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is set (0 when there are none).

    ``dim=None`` reduces everything to a scalar; otherwise along ``dim``.
    """
    mask = mask.to(torch.bool)
    total = torch.where(mask, x, torch.zeros_like(x))
    if dim is None:
        return total.sum() / mask.sum().clamp(min=1)
    return total.sum(dim) / mask.sum(dim).clamp(min=1)


def aggregate(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    *,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> Tensor:
    """Reduce per-token losses ``loss_mat`` [B, T] over ``mask`` [B, T] to a scalar.

    - ``token-mean``: sum(loss * mask) / num_tokens (default mask.sum()); every token weighs the same.
    - ``seq-mean-token-mean``: sum_b mean_t(loss_b) / num_sequences; each sequence
      weighs the same (a sequence with no mask token contributes 0).
    - ``seq-mean-token-sum``: sum_b sum_t(loss_b) / num_sequences.
    - ``seq-mean-token-sum-norm`` (Dr. GRPO): sum(loss * mask) / (num_sequences * norm_length),
      norm_length defaulting to T; the trainer passes the generation budget.

    ``num_sequences`` defaults to B (all rows, including rows with no mask token).
    The overrides let a trainer split a mini-batch into micro-batches: aggregating each
    micro-batch with the mini-batch's ``num_tokens`` / ``num_sequences`` and summing
    gives exactly the mini-batch loss.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {mode!r}; expected one of {', '.join(AGGREGATIONS)}")
    mask = mask.to(torch.bool)
    masked = torch.where(mask, loss_mat, torch.zeros_like(loss_mat))
    if mode == "token-mean":
        denominator = mask.sum().clamp(min=1) if num_tokens is None else num_tokens
        return masked.sum() / denominator
    sequences = loss_mat.shape[0] if num_sequences is None else num_sequences
    if mode == "seq-mean-token-mean":
        per_sequence = masked.sum(-1) / mask.sum(-1).clamp(min=1)
        return per_sequence.sum() / sequences
    if mode == "seq-mean-token-sum":
        return masked.sum() / sequences
    length = loss_mat.shape[-1] if norm_length is None else norm_length
    return masked.sum() / (sequences * length)


@dataclass
class PolicyLossOutput:
    loss: Tensor
    """Scalar loss to backpropagate."""
    metrics: dict[str, float] = field(default_factory=dict)
    """clip_frac_low, clip_frac_high, clip_frac_dual, ratio_mean, ratio_max, approx_kl (python
    floats, :func:`ratio_metrics`), and any a loss adds (clip-cov's cov_selected_frac)."""


def ratio_metrics(
    log_ratio: Tensor,
    mask: Tensor,
    *,
    ratio: Tensor | None = None,
    clipped_low: Tensor | None = None,
    clipped_high: Tensor | None = None,
    clipped_dual: Tensor | None = None,
) -> dict[str, float]:
    """The metrics every policy loss reports, as python floats over the masked tokens.

    ``log_ratio`` [B, T] is log pi - log pi_old per token: approx_kl is the mean k3
    estimate of KL(old || new), exp(lr) - lr - 1. ``ratio`` [B, T] is the ratio the loss
    acts on (default exp(log_ratio); a sequence-level loss passes its sequence ratio on
    each token): ratio_mean and ratio_max. The boolean masks [B, T] mark tokens whose
    lower, upper and dual clip bound is active (clip_frac_low, clip_frac_high,
    clip_frac_dual); a loss without such a bound passes None: 0.0.
    """
    with torch.no_grad():
        bool_mask = mask.to(torch.bool)
        log_ratio = log_ratio.detach()
        ratio = torch.exp(log_ratio) if ratio is None else ratio.detach()

        def fraction(active: Tensor | None) -> float:
            return 0.0 if active is None else float(masked_mean(active.float(), bool_mask))

        return {
            "clip_frac_low": fraction(clipped_low),
            "clip_frac_high": fraction(clipped_high),
            "clip_frac_dual": fraction(clipped_dual),
            "ratio_mean": float(masked_mean(ratio, bool_mask)),
            "ratio_max": float(ratio[bool_mask].max()) if bool(bool_mask.any()) else 0.0,
            "approx_kl": float(masked_mean(torch.exp(log_ratio) - log_ratio - 1.0, bool_mask)),
        }


PolicyLossFn = Callable[..., PolicyLossOutput]
POLICY_LOSSES = Registry("policy loss", inputs=4)
"""Name -> ``fn(logprobs, old_logprobs, advantages, mask, **params) -> PolicyLossOutput`` (inputs [B, T])."""


ROW_LOCAL_LOSSES: set[str] = set()
"""Policy losses in which each sequence's term is its advantages times a function of its
own tokens only: a sequence whose advantages are all zero adds exactly nothing to the loss
or its gradient, so the trainer may leave it out of the forward pass (the normalisers stay
the whole batch's). Losses that couple sequences (clip-cov and kl-cov select tokens by a
batch covariance) are not row-local."""


def register_policy_loss(name: str, *, row_local: bool = False) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator adding a policy loss to :data:`POLICY_LOSSES`. It takes ``(logprobs,
    old_logprobs, advantages, mask)`` [B, T] and the keywords ``aggregation``,
    ``num_tokens``, ``num_sequences``, ``norm_length`` (passed on to :func:`aggregate`)
    besides its own parameters, and returns a :class:`PolicyLossOutput`. ``row_local``:
    the loss is zero, with zero gradient, on a sequence whose advantages are all zero,
    whatever the other sequences hold (see :data:`ROW_LOCAL_LOSSES`)."""
    if row_local:
        ROW_LOCAL_LOSSES.add(name)
    return POLICY_LOSSES.register(name)


def compute_policy_loss(
    name: str, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, **params
) -> PolicyLossOutput:
    """Run the policy loss ``name``; a parameter it does not take is a TypeError naming it."""
    return POLICY_LOSSES.call(name, logprobs, old_logprobs, advantages, mask, **params)


@register_policy_loss("ppo-clip", row_local=True)
def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: LowerClip = 0.2,
    clip_high: UpperClip = 0.2,
    clip_ratio_c: DualClip | None = None,
    aggregation: str = "token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate with asymmetric clipping (DAPO clip-higher) and optional dual clip.

    All inputs are [B, T]. ratio = exp(logprobs - old_logprobs) (log-ratio clamped to
    [-20, 20] so one stale token cannot overflow);
    loss_t = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)), and with
    ``clip_ratio_c`` (as verl) loss_t = min(loss_t, -A * clip_ratio_c) where A < 0.
    The per-token loss is then reduced by :func:`aggregate`.

    Metrics are fractions of masked tokens: clip_frac_low (A < 0 and ratio < 1 - clip_low),
    clip_frac_high (A > 0 and ratio > 1 + clip_high), clip_frac_dual (A < 0 and the dual
    bound is active); ratio_mean / ratio_max over masked tokens; approx_kl = mean k3
    estimate of KL(old || new) over masked tokens.
    """
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(unclipped, clipped)
    dual_active = torch.zeros_like(mask, dtype=torch.bool)
    if clip_ratio_c is not None:
        dual_bound = -advantages * clip_ratio_c
        dual_active = (advantages < 0) & (loss_mat > dual_bound)
        loss_mat = torch.where(dual_active, dual_bound, loss_mat)
    loss = aggregate(
        loss_mat, mask, aggregation, num_tokens=num_tokens, num_sequences=num_sequences, norm_length=norm_length
    )

    metrics = ratio_metrics(
        log_ratio,
        mask,
        ratio=ratio,
        clipped_low=(advantages < 0) & (ratio < 1.0 - clip_low),
        clipped_high=(advantages > 0) & (ratio > 1.0 + clip_high),
        clipped_dual=dual_active,
    )
    return PolicyLossOutput(loss=loss, metrics=metrics)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip_range: float | None = 0.2,
    aggregation: str = "token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO's clipped value loss -> (scalar loss, metrics).

    All inputs are [B, T]. loss_t = 0.5 * max((V - R)^2, (V_clip - R)^2) with
    V_clip = V_old + clip(V - V_old, -clip_range, clip_range) (``clip_range=None``: the
    plain squared error), reduced by :func:`aggregate`. Metrics: value_clip_frac (masked
    tokens where the clipped term is the larger one) and value_mean.
    """
    unclipped = (values - returns).square()
    if clip_range is None:
        loss_mat, clipped_active = 0.5 * unclipped, torch.zeros_like(mask, dtype=torch.bool)
    else:
        clipped_values = old_values + (values - old_values).clamp(-clip_range, clip_range)
        clipped = (clipped_values - returns).square()
        loss_mat = 0.5 * torch.maximum(unclipped, clipped)
        clipped_active = clipped > unclipped
    loss = aggregate(
        loss_mat, mask, aggregation, num_tokens=num_tokens, num_sequences=num_sequences, norm_length=norm_length
    )
    with torch.no_grad():
        bool_mask = mask.to(torch.bool)
        metrics = {
            "value_clip_frac": float(masked_mean(clipped_active.float(), bool_mask)),
            "value_mean": float(masked_mean(values, bool_mask)),
        }
    return loss, metrics

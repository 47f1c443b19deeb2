"""The plain policy-gradient losses of :data:`~agentic_rl.algorithms.losses.POLICY_LOSSES`:
GPG (-A log pi, no ratio) and REINFORCE with an unclipped importance ratio (-A r). Neither
bounds the update, which sets them apart from the clipped or gated losses of
``policy_losses.py``; they share its registry signature, its metrics
(:func:`ratio_metrics`, clip fractions 0.0) and its clamped log-ratio
(:func:`~agentic_rl.algorithms.policy_losses.clamped_log_ratio`), whose import registers
the losses there first.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algorithms.losses import PolicyLossOutput, aggregate, ratio_metrics, register_policy_loss
from agentic_rl.algorithms.policy_losses import clamped_log_ratio


@register_policy_loss("gpg", row_local=True)
def gpg(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    aggregation: str = "token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """GPG (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for
    Model Reasoning", arXiv 2504.02546): loss_t = -A_t * log pi_t, reduced by
    :func:`aggregate`; no ratio, no clip. ``old_logprobs`` only feed the metrics: after
    the first mini-batch the gradient is not importance-corrected (as GPG and verl).
    Same as verl's ``gpg`` loss (GPG's own advantage scaling is not included).
    """
    loss = aggregate(
        -advantages * logprobs,
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        norm_length=norm_length,
    )
    return PolicyLossOutput(loss=loss, metrics=ratio_metrics(clamped_log_ratio(logprobs, old_logprobs, mask), mask))


@register_policy_loss("reinforce", row_local=True)
def reinforce_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    aggregation: str = "token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """REINFORCE with an unclipped importance ratio (Williams 1992): loss_t = -A_t * r_t,
    r_t = pi_t / pi_old_t, reduced by :func:`aggregate`. Its gradient is
    -A_t r_t grad log pi_t: with one update per batch (old = current, r = 1) that of
    -A_t log pi_t, later the importance-weighted policy gradient, without a bound.

    Naming: verl has no unclipped ratio loss under this name; its ``vanilla`` loss is
    PPO's clipped surrogate (here ``ppo-clip``). verl's REINFORCE (``bypass_mode`` with
    loss_type ``reinforce``) is -w A log pi with w = sg(pi / pi_old), optionally
    truncated; untruncated, its gradient is this one's.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, mask)
    loss = aggregate(
        -advantages * torch.exp(log_ratio),
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        norm_length=norm_length,
    )
    return PolicyLossOutput(loss=loss, metrics=ratio_metrics(log_ratio, mask))

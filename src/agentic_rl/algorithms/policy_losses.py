"""Policy losses beside ``ppo-clip`` in :data:`~agentic_rl.algorithms.losses.POLICY_LOSSES`:
a sequence-level ratio (GSPO), a clipped stop-gradient importance weight (CISPO), a soft
gate instead of a clip (SAPO) and covariance-based entropy control (Clip-Cov, KL-Cov).
The plain policy gradients (GPG, REINFORCE) are in ``pg_losses.py`` and share
:func:`clamped_log_ratio`.

Each has the registry's signature ``fn(logprobs, old_logprobs, advantages, mask, *,
<own parameters>, aggregation, num_tokens, num_sequences, norm_length) ->
PolicyLossOutput`` (inputs [B, T]; ``mask`` is the loss mask), reduces its per-token
loss with :func:`aggregate`, and reports :func:`ratio_metrics` (a clip fraction is 0.0
where the loss has no such bound). Log-ratios are clamped to [-20, 20] before ``exp``
(as ppo-clip) and set to 0 outside the mask, so whatever padding holds cannot reach the
loss or its gradient.

The trainer applies the rollout correction by multiplying the advantages with
non-negative per-token weights w. Every loss here satisfies loss(A * w) = the per-token
loss weighted by w, except: ``gspo`` reads the sequence's mean weighted advantage
(exact for one weight per sequence, as the seq-* corrections give), and ``clip-cov`` /
``kl-cov`` pick tokens by a covariance that reads the weighted advantage, and kl-cov's
penalty does not scale with it.

The reference for each formula is verl's ``verl/trainer/ppo/core_algos.py``; each
docstring names where this one differs on purpose.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algorithms.losses import PolicyLossOutput, aggregate, masked_mean, ratio_metrics, register_policy_loss
from agentic_rl.algorithms.params import Fraction, LowerClip, NonNegative, Positive, UpperClip

_MAX_LOG_RATIO = 20.0


def clamped_log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """log pi - log pi_old per token [B, T], clamped, 0 outside ``mask``."""
    inside = torch.where(mask.to(torch.bool), logprobs - old_logprobs, torch.zeros_like(logprobs))
    return inside.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def _per_token(per_sequence: Tensor, like: Tensor) -> Tensor:
    """[B] -> [B, T]: the sequence's value on each of its positions."""
    return per_sequence[:, None].expand_as(like)


def token_covariance(advantages: Tensor, logprobs: Tensor, mask: Tensor) -> Tensor:
    """Per-token centred product (A - mean A) * (log pi - mean log pi) [B, T], means over
    the masked tokens, without gradient: the token's contribution to the covariance that
    drives entropy change (Cui et al. 2025). Outside ``mask`` the value is meaningless."""
    with torch.no_grad():
        logprobs = torch.where(mask.to(torch.bool), logprobs.detach(), torch.zeros_like(logprobs))
        return (advantages - masked_mean(advantages, mask)) * (logprobs - masked_mean(logprobs, mask))


@register_policy_loss("gspo", row_local=True)
def gspo(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: LowerClip = 3e-4,
    clip_high: UpperClip = 4e-4,
    aggregation: str = "seq-mean-token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071).

    s_i = exp(mean_t(log pi_t - log pi_old_t)) over sequence i's masked tokens (the
    length-normalised sequence likelihood ratio, with gradient through every token);
    A_i = mean_t(A_t), the sequence's mean advantage (its outcome advantage; with rollout
    correction the mean weighted advantage);
    loss_i = max(-A_i s_i, -A_i clip(s_i, 1 - clip_low, 1 + clip_high)),
    put on each of the sequence's tokens and reduced by :func:`aggregate`. Paper defaults:
    ranges 3e-4 / 4e-4 and seq-mean-token-mean (one term per sequence:
    sum_i loss_i / num_sequences); token-mean weighs sequences by their length.

    Metrics: ratio_mean / ratio_max of s_i and the clip fractions (A_i < 0 and
    s_i < 1 - low; A_i > 0 and s_i > 1 + high) over masked tokens; approx_kl per token.

    Differences from verl: verl's ``gspo`` is the paper's GSPO-token (here
    :func:`gspo_token`, equal in value and gradient when each sequence has one
    advantage) and always aggregates seq-mean-token-mean; here ``aggregation`` is
    honoured like any loss's (the ``gspo`` preset sets seq-mean-token-mean). verl clamps
    the log sequence ratio at 10 from above; here each token's log-ratio is clamped to
    [-20, 20] before the mean, as in ppo-clip.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, mask)
    ratio = torch.exp(masked_mean(log_ratio, mask, dim=-1))
    advantage = masked_mean(advantages, mask, dim=-1)
    per_sequence = torch.maximum(-advantage * ratio, -advantage * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    loss = aggregate(
        _per_token(per_sequence, logprobs),
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        norm_length=norm_length,
    )
    metrics = ratio_metrics(
        log_ratio,
        mask,
        ratio=_per_token(ratio, log_ratio),
        clipped_low=_per_token((advantage < 0) & (ratio < 1.0 - clip_low), mask),
        clipped_high=_per_token((advantage > 0) & (ratio > 1.0 + clip_high), mask),
    )
    return PolicyLossOutput(loss=loss, metrics=metrics)


@register_policy_loss("gspo-token", row_local=True)
def gspo_token(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: LowerClip = 3e-4,
    clip_high: UpperClip = 4e-4,
    aggregation: str = "seq-mean-token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """GSPO-token (the token-level variant in the GSPO paper, arXiv 2507.18071).

    s_i,t = sg[s_i] * pi_t / sg[pi_t]: the value of the sequence ratio s_i of
    :func:`gspo` on every token, the gradient of log pi_t;
    loss_t = max(-A_t s_i,t, -A_t clip(s_i,t, 1 - clip_low, 1 + clip_high)),
    reduced by :func:`aggregate` (paper: seq-mean-token-mean). Each token keeps its own
    advantage (per-token credit, or rollout-correction weights); when all tokens of a
    sequence share one advantage it equals :func:`gspo` in value and gradient.
    Metrics as :func:`gspo`, the clip fractions by each token's advantage.

    Same as verl's ``gspo`` except that ``aggregation`` is honoured and each token's
    log-ratio is clamped to [-20, 20] before the mean (verl: log s_i,t <= 10).
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, mask)
    sequence_log_ratio = masked_mean(log_ratio, mask, dim=-1).detach()
    # log pi_t - sg[log pi_t] is 0 in value and carries log pi_t's gradient.
    own = torch.where(mask.to(torch.bool), logprobs - logprobs.detach(), torch.zeros_like(logprobs))
    ratio = torch.exp(own + sequence_log_ratio[:, None])
    loss_mat = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    loss = aggregate(
        loss_mat, mask, aggregation, num_tokens=num_tokens, num_sequences=num_sequences, norm_length=norm_length
    )
    metrics = ratio_metrics(
        log_ratio,
        mask,
        ratio=ratio,
        clipped_low=(advantages < 0) & (ratio < 1.0 - clip_low),
        clipped_high=(advantages > 0) & (ratio > 1.0 + clip_high),
    )
    return PolicyLossOutput(loss=loss, metrics=metrics)


@register_policy_loss("cispo", row_local=True)
def cispo(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: LowerClip | None = None,
    clip_high: UpperClip = 0.2,
    aggregation: str = "token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """CISPO (MiniMax-M1, arXiv 2506.13585): clip the importance weight, not the update.

    r_t = pi_t / pi_old_t; w_t = sg(clip(r_t, 1 - clip_low, 1 + clip_high));
    loss_t = -w_t * A_t * log pi_t, reduced by :func:`aggregate` (paper: token-mean over
    the batch's tokens). The weight is a constant, so every token keeps a gradient
    w_t * A_t * grad log pi_t however far its ratio moved (PPO's clip zeroes it).
    Defaults: no lower bound (``clip_low=None``: the paper sets eps_low large and
    tunes only eps_high) and clip_high 0.2 (verl's example; the paper does not
    state its value). Metrics: clip_frac_low / clip_frac_high are tokens whose weight
    hit the bound, whatever the advantage's sign (the weight scales both).

    Same formula as verl's ``cispo``; verl takes the bounds from PPO's clip_ratio_low /
    clip_ratio_high (its example sets clip_ratio_low=10 for no lower bound), here they
    are CISPO's own knobs so choosing the loss keeps its defaults.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, mask)
    ratio = torch.exp(log_ratio)
    lower = None if clip_low is None else 1.0 - clip_low
    weight = ratio.clamp(min=lower, max=1.0 + clip_high).detach()
    loss = aggregate(
        -weight * advantages * logprobs,
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        norm_length=norm_length,
    )
    metrics = ratio_metrics(
        log_ratio,
        mask,
        clipped_low=None if lower is None else ratio < lower,
        clipped_high=ratio > 1.0 + clip_high,
    )
    return PolicyLossOutput(loss=loss, metrics=metrics)


@register_policy_loss("sapo", row_local=True)
def sapo(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    tau_pos: Positive = 1.0,
    tau_neg: Positive = 1.05,
    aggregation: str = "seq-mean-token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """SAPO (Soft Adaptive Policy Optimization, arXiv 2511.20347): a smooth gate instead of
    a hard clip.

    r_t = pi_t / pi_old_t; tau_t = tau_pos where A_t > 0, else tau_neg;
    f(r) = sigmoid(tau (r - 1)) * 4 / tau; loss_t = -f(r_t) * A_t, reduced by
    :func:`aggregate` (paper and verl: seq-mean-token-mean). f'(1) = 1, so at r = 1 the
    gradient is the policy gradient; it decays smoothly as r leaves 1 (faster for
    negative advantages: tau_neg > tau_pos). Defaults tau_pos 1.0, tau_neg 1.05 (verl's,
    the paper's). No hard bound: clip fractions are 0.0.

    Same formula as verl's ``sapo``; verl always aggregates seq-mean-token-mean, here
    ``aggregation`` is honoured like any loss's.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, mask)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = aggregate(
        -gate * advantages,
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        norm_length=norm_length,
    )
    return PolicyLossOutput(loss=loss, metrics=ratio_metrics(log_ratio, mask))


@register_policy_loss("clip-cov")
def clip_cov(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: LowerClip = 0.2,
    clip_high: UpperClip = 0.2,
    cov_ratio: Fraction = 2e-4,
    cov_lb: float = 1.0,
    cov_ub: float = 5.0,
    aggregation: str = "token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
    Reasoning Language Models", arXiv 2505.22617).

    PPO's clipped surrogate (:func:`policy_loss` without dual clip, ``clip_low`` /
    ``clip_high``), except that max(1, int(cov_ratio * N)) tokens (N masked tokens
    in this call), drawn at random (torch's global generator) among the masked tokens
    that PPO does not clip and whose :func:`token_covariance` lies strictly between
    ``cov_lb`` and ``cov_ub``, get no gradient: high-covariance tokens are what
    collapses the entropy. Defaults (verl's): ratio 2e-4, bounds 1 and 5. Metrics as
    ppo-clip, plus cov_selected_frac.

    Difference from verl: verl multiplies the selected tokens' loss by 0, here it is
    detached, so the gradient is the same and the reported loss stays PPO's. The
    covariance (and the count N) are over the tokens of one call, a micro-batch in the
    trainer, as in verl; it reads the rollout-corrected advantage (verl applies the
    weights after the selection), so the selection is not invariant to the correction.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, mask)
    ratio = torch.exp(log_ratio)
    loss_mat = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    clipped_low = (advantages < 0) & (ratio < 1.0 - clip_low)
    clipped_high = (advantages > 0) & (ratio > 1.0 + clip_high)
    bool_mask = mask.to(torch.bool)
    covariance = token_covariance(advantages, logprobs, mask)
    candidates = bool_mask & ~clipped_low & ~clipped_high & (covariance > cov_lb) & (covariance < cov_ub)
    selected = _random_subset(candidates, max(int(cov_ratio * int(bool_mask.sum())), 1))
    loss_mat = torch.where(selected, loss_mat.detach(), loss_mat)
    loss = aggregate(
        loss_mat, mask, aggregation, num_tokens=num_tokens, num_sequences=num_sequences, norm_length=norm_length
    )
    metrics = ratio_metrics(log_ratio, mask, clipped_low=clipped_low, clipped_high=clipped_high)
    metrics["cov_selected_frac"] = float(masked_mean(selected.float(), bool_mask))
    return PolicyLossOutput(loss=loss, metrics=metrics)


def _random_subset(candidates: Tensor, count: int) -> Tensor:
    """A boolean mask like ``candidates`` with ``min(count, candidates.sum())`` of its set
    positions, drawn uniformly at random."""
    positions = torch.nonzero(candidates)
    chosen = positions[torch.randperm(len(positions))[:count].to(positions.device)]
    selected = torch.zeros_like(candidates)
    selected[chosen[:, 0], chosen[:, 1]] = True
    return selected


@register_policy_loss("kl-cov")
def kl_cov(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    cov_ratio: Fraction = 2e-4,
    kl_coef: NonNegative = 0.1,
    aggregation: str = "token-mean",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    norm_length: float | None = None,
) -> PolicyLossOutput:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617): a KL penalty on the top-covariance tokens.

    loss_t = -A_t r_t (no clip), plus kl_coef * |log r_t| on the
    max(1, int(cov_ratio * N)) masked tokens with the largest
    :func:`token_covariance` (N masked tokens in this call), reduced by
    :func:`aggregate`. Defaults (verl's): ratio 2e-4, coefficient 0.1. No clip: clip
    fractions are 0.0; cov_selected_frac is the penalised fraction.

    Same as verl's ``kl_cov`` (statistics over one call, a micro-batch in the trainer).
    Not linear in the advantage: the penalty does not scale with a rollout-correction
    weight, and the top-k reads the weighted advantage.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, mask)
    ratio = torch.exp(log_ratio)
    bool_mask = mask.to(torch.bool)
    selected = torch.zeros_like(bool_mask)
    if bool(bool_mask.any()):
        flat = torch.nonzero(bool_mask.reshape(-1)).squeeze(1)
        count = max(int(cov_ratio * len(flat)), 1)
        top = torch.topk(token_covariance(advantages, logprobs, mask).reshape(-1)[flat], count).indices
        selected.view(-1)[flat[top]] = True
    penalty = torch.where(selected, kl_coef * log_ratio.abs(), torch.zeros_like(log_ratio))
    loss = aggregate(
        -advantages * ratio + penalty,
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        norm_length=norm_length,
    )
    metrics = ratio_metrics(log_ratio, mask)
    metrics["cov_selected_frac"] = float(masked_mean(selected.float(), bool_mask))
    return PolicyLossOutput(loss=loss, metrics=metrics)

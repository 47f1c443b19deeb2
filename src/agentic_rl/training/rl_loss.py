"""The loss of one micro-batch of the RL update: policy loss, KL term, value loss.

The update (training/rl_update.py) splits each mini-batch into length-bucketed
micro-batches and backpropagates each one's loss; this module computes that loss from one
collated micro-batch: the policy loss on the sampler-corrected advantages, the
KL-to-reference term when KL is a loss, and the critic's value loss, together with the
per-token sums the update's metrics are built from. It holds no state: the policy's
forward, the critic and the reference come in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch

from agentic_rl.algorithms import aggregate, compute_policy_loss, kl_penalty, rollout_correction, value_loss
from agentic_rl.config import AlgorithmConfig
from agentic_rl.training.batch import TokenBatch
from agentic_rl.training.reference import ReferencePolicy
from agentic_rl.training.value import Critic


def micro_batch_loss(
    batch: TokenBatch,
    normalisers: dict[str, float],
    logprobs_of: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
    *,
    algorithm: AlgorithmConfig,
    critic: Critic | None,
    reference: ReferencePolicy | None,
    correction_mode: str,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float], dict[str, float]]:
    """Policy loss + the KL-to-reference term (when KL is a loss) + the value loss (with a
    critic) on one micro-batch -> (loss, entropy [b, T], the sums it adds to the
    update's metrics: token-weighted, divided by the update's loss tokens at the end,
    the values whose maximum over the update is a metric).

    ``logprobs_of(batch, with_entropy=True)``: the policy's log-probs and entropies of the
    batch's loss tokens; ``correction_mode``: the sampler-vs-trainer importance correction
    in use; ``temperature``: the sampler's, which the reference's log-probs divide by."""
    shared_critic = critic is not None and critic.mode == "shared"
    with critic.values_from_policy_forward(batch.loss_mask) if shared_critic else nullcontext({}) as captured:
        logprobs, entropy = logprobs_of(batch, with_entropy=True)
    old = batch.per_token["old_logprobs"] if "old_logprobs" in batch.per_token else logprobs.detach()
    # The sampler drew the tokens; the loss's ratio is against the trainer's pre-update
    # policy: its importance weight scales each token's loss (through the advantage,
    # which every registered loss is linear in for a non-negative weight).
    correction = rollout_correction(
        old,
        batch.per_token["sampler_logprobs"],
        batch.loss_mask,
        mode=correction_mode,
        cap=algorithm.correction.cap,
        low=algorithm.correction.low,
        high=algorithm.correction.high,
    )
    advantages = batch.per_token["advantages"] * correction.weights
    out = compute_policy_loss(
        algorithm.policy_loss.name,
        logprobs,
        old,
        advantages,
        batch.loss_mask,
        **algorithm.policy_loss.params,
        aggregation=algorithm.aggregation,
        **normalisers,
    )
    loss, loss_tokens, sums = out.loss, float(batch.loss_mask.sum()), {}
    if reference is not None and not algorithm.kl.in_reward:
        kl = kl_penalty(logprobs, reference.logprobs(batch, temperature), algorithm.kl.estimator)
        loss = loss + algorithm.kl.coef * aggregate(kl, batch.loss_mask, algorithm.aggregation, **normalisers)
        sums["kl"] = float((kl.detach() * batch.loss_mask).sum())
    if critic is not None:
        values = (
            captured["values"]
            if shared_critic
            else critic.values(batch.input_ids, batch.attention_mask, batch.loss_mask)
        )
        critic_loss, critic_metrics = value_loss(
            values,
            batch.per_token["old_values"],
            batch.per_token["returns"],
            batch.loss_mask,
            clip_range=algorithm.critic.value_clip or None,
            aggregation=algorithm.aggregation,
            **normalisers,
        )
        loss = loss + algorithm.critic.value_loss_coef * critic_loss
        sums["value_loss"] = float(
            critic_loss.detach()
        )  # already this micro-batch's share of the mini-batch loss (global normalisers)
        sums.update({key: value * loss_tokens for key, value in critic_metrics.items()})
    sums["entropy"] = float((entropy * batch.loss_mask).sum())
    sums.update(
        {key: out.metrics[key] * loss_tokens for key in ("clip_frac_low", "clip_frac_high", "ratio_mean", "approx_kl")}
    )
    maxima = {"rollout_logprob_diff_max": correction.metrics.pop("rollout_logprob_diff_max")}
    sums.update({key: value * loss_tokens for key, value in correction.metrics.items()})
    return loss, entropy, sums, maxima

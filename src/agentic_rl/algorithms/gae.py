"""Generalised advantage estimation over sampled tokens, and masked whitening.

Multi-turn episodes interleave sampled tokens (loss_mask 1) with observation tokens
(loss_mask 0) that the environment wrote. The policy made no decision at an
observation token, so the time axis of GAE is the sequence of sampled positions only:
the bootstrap goes from the last sampled token of turn t straight to the first sampled
token of turn t + 1, skipping the observation in between.

Shapes: ``B`` trajectories, ``T`` padded token positions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algorithms.advantages import AdvantageInputs, outcome_token_rewards, register_advantage
from agentic_rl.algorithms.params import UnitInterval


def gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """GAE(gamma, lambda) along the sampled positions of each row -> (advantages, returns), both [B, T].

    With sampled positions t_1 < t_2 < ... of a row (``mask`` [B, T] set) and
    next(t_i) = t_{i+1}: delta_t = r_t + gamma * V(next(t)) - V(t), with V = 0 after the
    last one, and A_t = delta_t + gamma * lambda * A(next(t)). ``returns = A + V`` are the
    critic's targets. ``token_rewards`` and ``values`` are [B, T]; whatever they hold at
    unsampled positions is ignored, and both outputs are 0 there.
    """
    mask = mask.to(torch.bool)
    rewards = torch.where(mask, token_rewards, torch.zeros_like(token_rewards))
    values = torch.where(mask, values, torch.zeros_like(values)).to(rewards.dtype)
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    next_advantage = torch.zeros_like(next_value)
    for t in range(rewards.shape[1] - 1, -1, -1):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        current = delta + gamma * lam * next_advantage
        sampled = mask[:, t]
        # Unsampled positions pass the carry through unchanged: they are not time steps.
        advantages[:, t] = torch.where(sampled, current, torch.zeros_like(current))
        next_value = torch.where(sampled, values[:, t], next_value)
        next_advantage = torch.where(sampled, current, next_advantage)
    return advantages, advantages + values


def masked_whiten(x: Tensor, mask: Tensor, *, epsilon: float = 1e-8) -> Tensor:
    """(x - mean) / sqrt(var + epsilon) over the positions where ``mask`` [B, T] is set,
    with the unbiased variance (as verl's ``masked_whiten``); 0 elsewhere -> [B, T]."""
    mask = mask.to(torch.bool)
    count = mask.sum()
    if count == 0:
        return torch.zeros_like(x)
    values = x[mask]
    mean = values.mean()
    variance = values.var(unbiased=True) if count > 1 else torch.zeros((), dtype=x.dtype, device=x.device)
    whitened = (x - mean) * torch.rsqrt(variance + epsilon)
    return torch.where(mask, whitened, torch.zeros_like(whitened))


@register_advantage("gae")
def gae_advantage(
    inputs: AdvantageInputs, *, gamma: UnitInterval = 1.0, lam: UnitInterval = 0.95, whiten: bool = True
) -> Tensor:
    """PPO's advantage: :func:`gae` on ``token_rewards`` (default: outcome on the last
    sampled token) and critic ``values`` (required), whitened over the batch -> [B, T]."""
    if inputs.values is None:
        raise ValueError("the gae estimator needs critic values (AdvantageInputs.values); set algorithm.critic.kind")
    advantages, _ = gae(outcome_token_rewards(inputs), inputs.values, inputs.response_mask, gamma=gamma, lam=lam)
    return masked_whiten(advantages, inputs.response_mask) if whiten else advantages

"""REINFORCE++ (Hu et al., 2025): critic-free token returns, whitened over the batch.

Shapes: ``B`` trajectories, ``T`` padded token positions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algorithms.advantages import AdvantageInputs, group_stats, outcome_token_rewards, register_advantage
from agentic_rl.algorithms.gae import gae, masked_whiten
from agentic_rl.algorithms.params import UnitInterval


def discounted_token_returns(token_rewards: Tensor, mask: Tensor, *, gamma: float = 1.0) -> Tensor:
    """G_t = sum_{k >= t} gamma^(k - t) r_k over the sampled positions of each row -> [B, T]
    (observation tokens are not time steps; 0 at unsampled positions). This is
    :func:`gae` with V = 0 and lambda = 1."""
    advantages, _ = gae(token_rewards, torch.zeros_like(token_rewards), mask, gamma=gamma, lam=1.0)
    return advantages


@register_advantage("reinforce++")
def reinforce_plus_plus(inputs: AdvantageInputs, *, gamma: UnitInterval = 1.0) -> Tensor:
    """REINFORCE++: discounted returns of ``token_rewards`` (outcome on the last sampled
    token, minus the KL penalty per token when the trainer puts KL in the reward),
    whitened over every sampled token of the batch -> [B, T]."""
    returns = discounted_token_returns(outcome_token_rewards(inputs), inputs.response_mask, gamma=gamma)
    return masked_whiten(returns, inputs.response_mask)


@register_advantage("reinforce++-baseline")
def reinforce_plus_plus_baseline(inputs: AdvantageInputs, *, gamma: UnitInterval = 1.0) -> Tensor:
    """REINFORCE++-baseline: as :func:`reinforce_plus_plus`, with the group's mean outcome
    reward subtracted from each outcome first (the reward on the last sampled token), then
    batch whitening -> [B, T]."""
    mask = inputs.response_mask.to(torch.bool)
    rewards = outcome_token_rewards(inputs)
    mean, _, _ = group_stats(inputs.rewards, inputs.group_index)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(1, keepdim=True)
    rewards = rewards - torch.where(positions == last, mean[:, None].to(rewards.dtype), torch.zeros_like(rewards))
    returns = discounted_token_returns(rewards, mask, gamma=gamma)
    return masked_whiten(returns, mask)

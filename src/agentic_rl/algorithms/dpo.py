"""Direct Preference Optimization (Rafailov et al. 2023) and its IPO variant (Azar et al.
2023): pure functions over per-pair sequence log-probabilities.

Shapes: ``P`` preference pairs. A sequence log-prob is the sum over the response's
policy tokens (assistant tokens only) of log pi(token | context); IPO uses the
per-token mean instead (its margin target 1 / (2 beta) assumes a length-free scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

LOSS_TYPES = ("sigmoid", "ipo")


@dataclass
class DPOLossOutput:
    loss: Tensor
    """Scalar: the mean loss over the pairs."""
    chosen_rewards: Tensor
    """[P] implicit rewards beta * (log pi(chosen) - log ref(chosen)), detached."""
    rejected_rewards: Tensor
    """[P] implicit rewards of the rejected responses, detached."""

    @property
    def margins(self) -> Tensor:
        return self.chosen_rewards - self.rejected_rewards

    @property
    def accuracy(self) -> float:
        """Fraction of pairs whose chosen response has the larger implicit reward."""
        return float((self.margins > 0).float().mean()) if self.margins.numel() else 0.0


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    reference_chosen: Tensor,
    reference_rejected: Tensor,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    loss_type: str = "sigmoid",
) -> DPOLossOutput:
    """DPO loss over P pairs; every input is [P] sequence log-probs.

    With h = (log pi(c) - log ref(c)) - (log pi(r) - log ref(r)):

    * ``sigmoid`` (DPO): -(1 - eps) * log sigmoid(beta * h) - eps * log sigmoid(-beta * h),
      where eps = ``label_smoothing`` is the assumed probability that a label is flipped
      (conservative DPO; eps = 0 is plain DPO);
    * ``ipo``: (h - 1 / (2 beta))^2.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type: expected one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    chosen_ratio = policy_chosen - reference_chosen
    rejected_ratio = policy_rejected - reference_rejected
    h = chosen_ratio - rejected_ratio
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    else:
        losses = (h - 1 / (2 * beta)) ** 2
    return DPOLossOutput(losses.mean(), (beta * chosen_ratio).detach(), (beta * rejected_ratio).detach())


def sequence_logprobs(token_logprobs: Tensor, loss_mask: Tensor, *, average: bool = False) -> Tensor:
    """[B, T] token log-probs and mask -> [B] sums (or means, ``average``) over the masked tokens."""
    mask = loss_mask.to(token_logprobs.dtype)
    total = (token_logprobs * mask).sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total

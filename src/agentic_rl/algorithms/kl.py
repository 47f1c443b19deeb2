"""KL-to-reference penalty estimators (Schulman, "Approximating KL Divergence")."""

from __future__ import annotations

import torch
from torch import Tensor

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi || ref) from tokens sampled by pi -> Tensor[B, T].

    Inputs are [B, T] log-probabilities of the sampled tokens under pi and ref.
    - k1 = logp - logref (unbiased, high variance, can be negative)
    - k2 = 0.5 * (logp - logref)^2 (biased, low variance, >= 0)
    - k3 = exp(logref - logp) - (logref - logp) - 1 (unbiased, low variance, >= 0);
      the log-ratio is clamped to [-20, 20] first so exp cannot overflow.
    """
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        reverse = (-log_ratio).clamp(-20.0, 20.0)
        return torch.exp(reverse) - reverse - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {', '.join(KL_ESTIMATORS)}")

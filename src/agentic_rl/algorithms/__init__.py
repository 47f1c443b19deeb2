"""Pure tensor functions of the RL objective: advantages, policy losses, aggregation,
KL estimators, reward shaping, and named presets."""

from agentic_rl.algorithms.advantages import (
    ADVANTAGES,
    AdvantageInputs,
    compute_advantages,
    group_stats,
    grpo,
    register_advantage,
    rloo,
    zero_std_group_fraction,
)
from agentic_rl.algorithms.kl import KL_ESTIMATORS, kl_penalty
from agentic_rl.algorithms.losses import AGGREGATIONS, PolicyLossOutput, aggregate, masked_mean, policy_loss
from agentic_rl.algorithms.presets import PRESET_DESCRIPTIONS, PRESETS
from agentic_rl.algorithms.shaping import overlong_penalty

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "PRESETS",
    "PRESET_DESCRIPTIONS",
    "AdvantageInputs",
    "PolicyLossOutput",
    "aggregate",
    "compute_advantages",
    "group_stats",
    "grpo",
    "kl_penalty",
    "masked_mean",
    "overlong_penalty",
    "policy_loss",
    "register_advantage",
    "rloo",
    "zero_std_group_fraction",
]

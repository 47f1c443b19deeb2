"""Pure tensor functions of the RL objective: advantages (outcome, token-level, turn-level),
group filters, policy and value losses, aggregation, KL estimators, reward shaping, and
named presets."""

from agentic_rl.algorithms.advantages import (
    ADVANTAGES,
    AdvantageInputs,
    compute_advantages,
    group_normalized,
    group_stats,
    grpo,
    outcome_token_rewards,
    register_advantage,
    rloo,
    zero_std_group_fraction,
)
from agentic_rl.algorithms.gae import gae, gae_advantage, masked_whiten
from agentic_rl.algorithms.group_filters import GROUP_FILTERS, drop_zero_variance, filter_groups, keep_top_std
from agentic_rl.algorithms.kl import KL_ESTIMATORS, kl_penalty
from agentic_rl.algorithms.losses import AGGREGATIONS, PolicyLossOutput, aggregate, masked_mean, policy_loss, value_loss
from agentic_rl.algorithms.reinforce import discounted_token_returns, reinforce_plus_plus, reinforce_plus_plus_baseline
from agentic_rl.algorithms.turn_credit import discounted_turn_returns, gigpo, mt_grpo, step_rewards
from agentic_rl.algorithms.presets import PRESET_DESCRIPTIONS, PRESETS
from agentic_rl.algorithms.shaping import overlong_penalty

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "GROUP_FILTERS",
    "KL_ESTIMATORS",
    "PRESETS",
    "PRESET_DESCRIPTIONS",
    "AdvantageInputs",
    "PolicyLossOutput",
    "aggregate",
    "compute_advantages",
    "discounted_token_returns",
    "discounted_turn_returns",
    "drop_zero_variance",
    "filter_groups",
    "gae",
    "gae_advantage",
    "gigpo",
    "group_normalized",
    "group_stats",
    "grpo",
    "keep_top_std",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "mt_grpo",
    "outcome_token_rewards",
    "overlong_penalty",
    "policy_loss",
    "register_advantage",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "rloo",
    "step_rewards",
    "value_loss",
    "zero_std_group_fraction",
]

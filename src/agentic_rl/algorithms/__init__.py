"""Pure tensor functions of the RL objective: advantages (outcome, token-level, turn-level),
group filters, policy and value losses, aggregation, KL estimators, reward shaping, and
named presets. Advantages, group filters and policy losses are registries
(:class:`Registry`): looked up by name, with strict keyword parameters."""

from agentic_rl.algorithms.advantages import (
    ADVANTAGES,
    AdvantageInputs,
    as_float,
    compute_advantages,
    group_normalized,
    group_stats,
    grpo,
    outcome_token_rewards,
    register_advantage,
    rloo,
    zero_std_group_fraction,
)
from agentic_rl.algorithms.baselines import grpo_passk, opo, remax
from agentic_rl.algorithms.correction import (
    ROLLOUT_CORRECTIONS,
    CorrectionOutput,
    mismatch_metrics,
    resolve_old_logprobs,
    resolve_rollout_correction,
    rollout_correction,
)
from agentic_rl.algorithms.gae import gae, gae_advantage, masked_whiten
from agentic_rl.algorithms.group_filters import (
    GROUP_FILTERS,
    drop_zero_variance,
    filter_groups,
    keep_top_std,
    register_group_filter,
)
from agentic_rl.algorithms.kl import KL_ESTIMATORS, kl_penalty
from agentic_rl.algorithms.losses import (
    AGGREGATIONS,
    POLICY_LOSSES,
    ROW_LOCAL_LOSSES,
    PolicyLossOutput,
    aggregate,
    compute_policy_loss,
    masked_mean,
    policy_loss,
    ratio_metrics,
    register_policy_loss,
    value_loss,
)
from agentic_rl.algorithms.pg_losses import gpg, reinforce_loss
from agentic_rl.algorithms.policy_losses import (
    cispo,
    clip_cov,
    gspo,
    gspo_token,
    kl_cov,
    sapo,
    token_covariance,
)
from agentic_rl.algorithms.presets import PRESET_DESCRIPTIONS, PRESETS
from agentic_rl.algorithms.registry import Registry, unknown_name
from agentic_rl.algorithms.reinforce import discounted_token_returns, reinforce_plus_plus, reinforce_plus_plus_baseline
from agentic_rl.algorithms.shaping import overlong_penalty
from agentic_rl.algorithms.turn_credit import discounted_turn_returns, gigpo, mt_grpo, step_rewards

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "GROUP_FILTERS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "ROW_LOCAL_LOSSES",
    "PRESETS",
    "PRESET_DESCRIPTIONS",
    "ROLLOUT_CORRECTIONS",
    "AdvantageInputs",
    "CorrectionOutput",
    "PolicyLossOutput",
    "Registry",
    "aggregate",
    "as_float",
    "cispo",
    "clip_cov",
    "compute_advantages",
    "compute_policy_loss",
    "discounted_token_returns",
    "discounted_turn_returns",
    "drop_zero_variance",
    "filter_groups",
    "gae",
    "gae_advantage",
    "gigpo",
    "gpg",
    "group_normalized",
    "group_stats",
    "grpo",
    "grpo_passk",
    "gspo",
    "gspo_token",
    "keep_top_std",
    "kl_cov",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "mismatch_metrics",
    "mt_grpo",
    "opo",
    "outcome_token_rewards",
    "overlong_penalty",
    "policy_loss",
    "ratio_metrics",
    "register_advantage",
    "register_group_filter",
    "register_policy_loss",
    "reinforce_loss",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "resolve_old_logprobs",
    "resolve_rollout_correction",
    "rloo",
    "rollout_correction",
    "sapo",
    "step_rewards",
    "token_covariance",
    "unknown_name",
    "value_loss",
    "zero_std_group_fraction",
]

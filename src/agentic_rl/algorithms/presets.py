"""Named algorithm presets: each fills every field of ``AlgorithmConfig`` left unset (so each
names every one of them)."""

from __future__ import annotations

from typing import Any

_GRPO: dict[str, Any] = {
    "advantage": "grpo",
    "policy_loss": "ppo-clip",
    "normalize_by_std": True,
    "clip_low": 0.2,
    "clip_high": 0.2,
    "clip_ratio_c": None,
    "aggregation": "seq-mean-token-mean",
    "kl_coef": 0.04,
    "kl_estimator": "k3",
    "overlong_buffer": 0,
    # Off for the outcome-only GRPO family; the presets below switch them on.
    "kl_in_reward": False,
    "gamma": 1.0,
    "lam": 0.95,
    "whiten_advantages": True,
    "critic": "none",
    "value_loss_coef": 0.5,
    "value_clip": 0.2,
    "critic_lr": 1e-5,
    "group_filter": "none",
    "keep_fraction": 0.25,
    "max_generation_rounds": 1,
    "step_advantage_weight": 1.0,
    "tool_turn_reward": 0.0,
}
# GRPO-TCR ("Demystifying RL in Agentic Reasoning"): clip_high 0.315 is the article's best
# of 0.28 / 0.315 / 0.35 (its released script uses 0.28). Clipping only acts from the
# second update on a batch, so the recipes take two mini-batches.
_GRPO_TCR: dict[str, Any] = {
    **_GRPO,
    "aggregation": "token-mean",
    "clip_high": 0.315,
    "kl_coef": 0.0,
    "overlong_buffer": 64,
}
_REINFORCE_PP: dict[str, Any] = {
    **_GRPO,
    "advantage": "reinforce++",
    "aggregation": "token-mean",
    "kl_coef": 0.01,
    "kl_estimator": "k1",
    "kl_in_reward": True,
}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": dict(_GRPO),
    "dr-grpo": {**_GRPO, "normalize_by_std": False, "aggregation": "seq-mean-token-sum-norm", "kl_coef": 0.0},
    "grpo-t": {**_GRPO, "aggregation": "token-mean", "kl_coef": 0.0},
    "grpo-scr": {**_GRPO, "clip_high": 0.28, "kl_coef": 0.0, "overlong_buffer": 64},
    "grpo-tcr": dict(_GRPO_TCR),
    "ppo": {**_GRPO, "advantage": "gae", "critic": "shared", "aggregation": "token-mean", "kl_coef": 0.0},
    "reinforce++": dict(_REINFORCE_PP),
    "reinforce++-baseline": {**_REINFORCE_PP, "advantage": "reinforce++-baseline"},
    "rloo": {**_GRPO, "advantage": "rloo", "kl_coef": 0.0},
    "dapo": {**_GRPO_TCR, "clip_high": 0.28, "group_filter": "zero-variance", "max_generation_rounds": 10},
    "mt-grpo": {**_GRPO_TCR, "advantage": "mt-grpo", "tool_turn_reward": 0.5},
    "gigpo": {**_GRPO_TCR, "advantage": "gigpo", "gamma": 0.95},
    "starpo-s": {
        **_GRPO_TCR,
        "advantage": "gae",
        "critic": "shared",
        "clip_high": 0.28,
        "overlong_buffer": 0,
        "group_filter": "top-std",
        "keep_fraction": 0.25,
    },
    "gspo": {
        **_GRPO,
        "policy_loss": "gspo",
        "aggregation": "seq-mean-token-mean",
        "kl_coef": 0.0,
        "gspo_clip_low": 3e-4,
        "gspo_clip_high": 4e-4,
    },
    "cispo": {
        **_GRPO,
        "policy_loss": "cispo",
        "aggregation": "token-mean",
        "kl_coef": 0.0,
        "cispo_clip_low": None,
        "cispo_clip_high": 0.2,
    },
}

PRESET_DESCRIPTIONS: dict[str, str] = {
    "grpo": "GRPO as in DeepSeekMath: std-normalized group advantage, sequence-mean loss, k3 KL at 0.04.",
    "dr-grpo": "Dr. GRPO: no std normalization, token sums over a fixed length budget, no KL.",
    "grpo-t": "GRPO with a token-mean loss and no KL.",
    "grpo-scr": "GRPO with sequence-mean loss, clip-higher (0.28) and soft overlong shaping, no KL.",
    "grpo-tcr": (
        'Default: GRPO-TCR ("Demystifying RL in Agentic Reasoning"): token-mean loss, no KL, soft overlong shaping'
        " (DAPO's, 64-token buffer for the short demo episodes), clip_low 0.2 (PPO's) and clip_high 0.315"
        " (the article's best of 0.28 / 0.315 / 0.35; its released script uses 0.28)."
    ),
    "ppo": "PPO: value head on the policy backbone, GAE (gamma 1, lambda 0.95) over sampled tokens, whitened advantages, value clipping 0.2.",
    "reinforce++": "REINFORCE++: discounted token returns whitened over the batch, k1 KL (0.01) in the reward, no critic.",
    "reinforce++-baseline": "REINFORCE++ with the group-mean outcome subtracted before the returns (then batch whitening).",
    "rloo": "RLOO: leave-one-out group baseline (unbiased), sequence-mean loss, no KL.",
    "dapo": "DAPO: GRPO-TCR with DAPO's clip_high 0.28, plus dynamic sampling (drop zero-variance groups, resample up to 10 rounds).",
    "mt-grpo": "MT-GRPO: GRPO-TCR with a turn-level advantage (tool-execution reward 0.5) on tokens before the first tool result.",
    "gigpo": "GiGPO: GRPO-TCR episode advantage plus step advantage within anchor-state groups (gamma 0.95).",
    "starpo-s": "StarPO-S (RAGEN): PPO with a shared critic, top 25% of groups by reward std, clip-higher (0.28), no KL.",
    "gspo": "GSPO (Qwen): sequence-level ratio exp(mean log-ratio) clipped to [1 - 3e-4, 1 + 4e-4] (the paper's ranges), one loss term per sequence (seq-mean-token-mean), GRPO advantage, no KL.",
    "cispo": (
        "CISPO (MiniMax-M1): -sg(clip(ratio)) * A * log pi on every token, the weight clipped above at 1.2 (verl's example;"
        " the paper does not state it) and not below (the paper), token-mean loss, GRPO advantage, no KL."
    ),
}

"""Named algorithm presets: the values that make each algorithm what it is, filled in under
what a config sets (``algorithm`` by ``AlgorithmConfig``, ``reward`` and ``rl`` by ``TrainConfig``)."""

from __future__ import annotations

from typing import Any

# A preset names the values that make the algorithm what it is, in the sections they live in
# (algorithm, reward, rl), and nothing that equals a default: the registered functions'
# signatures and the config fields hold those (tests/config/test_one_home.py checks it).
_GRPO: dict[str, Any] = {
    "algorithm": {
        "advantage": {"name": "grpo"},
        "policy_loss": {"name": "ppo-clip"},
        "aggregation": "seq-mean-token-mean",
        "kl": {"coef": 0.04},
    }
}
# GRPO-TCR ("Demystifying RL in Agentic Reasoning"): clip_high 0.315 is the article's best
# of 0.28 / 0.315 / 0.35 (its released script uses 0.28). Clipping only acts from the
# second update on a batch, so the recipes take two mini-batches.
_TCR_LOSS = {"name": "ppo-clip", "clip_high": 0.315}
_OVERLONG = {"overlong_buffer": 64}
_GRPO_TCR: dict[str, Any] = {
    "algorithm": {"advantage": {"name": "grpo"}, "policy_loss": _TCR_LOSS},
    "reward": _OVERLONG,
}
_KL_IN_REWARD = {"coef": 0.01, "estimator": "k1", "in_reward": True}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": _GRPO,
    "dr-grpo": {
        "algorithm": {
            "advantage": {"name": "grpo", "normalize_by_std": False},
            "policy_loss": {"name": "ppo-clip"},
            "aggregation": "seq-mean-token-sum-norm",
        }
    },
    "grpo-t": {"algorithm": {"advantage": {"name": "grpo"}, "policy_loss": {"name": "ppo-clip"}}},
    "grpo-scr": {
        "algorithm": {
            "advantage": {"name": "grpo"},
            "policy_loss": {"name": "ppo-clip", "clip_high": 0.28},
            "aggregation": "seq-mean-token-mean",
        },
        "reward": _OVERLONG,
    },
    "grpo-tcr": _GRPO_TCR,
    "ppo": {"algorithm": {"advantage": {"name": "gae"}, "policy_loss": {"name": "ppo-clip"}, "critic": "shared"}},
    "reinforce++": {"algorithm": {"advantage": {"name": "reinforce++"}, "kl": _KL_IN_REWARD}},
    "reinforce++-baseline": {"algorithm": {"advantage": {"name": "reinforce++-baseline"}, "kl": _KL_IN_REWARD}},
    "rloo": {
        "algorithm": {
            "advantage": {"name": "rloo"},
            "policy_loss": {"name": "ppo-clip"},
            "aggregation": "seq-mean-token-mean",
        }
    },
    "dapo": {
        "algorithm": {
            "advantage": {"name": "grpo"},
            "policy_loss": {"name": "ppo-clip", "clip_high": 0.28},
            "group_filter": {"name": "zero-variance"},
        },
        "reward": _OVERLONG,
        "rl": {"max_generation_rounds": 10},
    },
    "mt-grpo": {
        "algorithm": {"advantage": {"name": "mt-grpo"}, "policy_loss": _TCR_LOSS},
        "reward": {**_OVERLONG, "tool_turn_reward": 0.5},
    },
    "gigpo": {"algorithm": {"advantage": {"name": "gigpo"}, "policy_loss": _TCR_LOSS}, "reward": _OVERLONG},
    "starpo-s": {
        "algorithm": {
            "advantage": {"name": "gae"},
            "policy_loss": {"name": "ppo-clip", "clip_high": 0.28},
            "critic": "shared",
            "group_filter": {"name": "top-std"},
        }
    },
    "gspo": {
        "algorithm": {
            "advantage": {"name": "grpo"},
            "policy_loss": {"name": "gspo"},
            "aggregation": "seq-mean-token-mean",
        }
    },
    "cispo": {"algorithm": {"advantage": {"name": "grpo"}, "policy_loss": {"name": "cispo"}}},
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

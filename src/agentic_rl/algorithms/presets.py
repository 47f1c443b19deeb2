"""Named algorithm presets: each fills every field of ``AlgorithmConfig`` left unset."""

from __future__ import annotations

from typing import Any

_GRPO: dict[str, Any] = {
    "advantage": "grpo",
    "normalize_by_std": True,
    "clip_low": 0.2,
    "clip_high": 0.2,
    "clip_ratio_c": None,
    "aggregation": "seq-mean-token-mean",
    "kl_coef": 0.04,
    "kl_estimator": "k3",
    "overlong_buffer": 0,
}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": dict(_GRPO),
    "dr-grpo": {**_GRPO, "normalize_by_std": False, "aggregation": "seq-mean-token-sum-norm", "kl_coef": 0.0},
    "grpo-t": {**_GRPO, "aggregation": "token-mean", "kl_coef": 0.0},
    "grpo-scr": {**_GRPO, "clip_high": 0.28, "kl_coef": 0.0, "overlong_buffer": 64},
    "grpo-tcr": {**_GRPO, "aggregation": "token-mean", "clip_high": 0.28, "kl_coef": 0.0, "overlong_buffer": 64},
}

PRESET_DESCRIPTIONS: dict[str, str] = {
    "grpo": "GRPO as in DeepSeekMath: std-normalized group advantage, sequence-mean loss, k3 KL at 0.04.",
    "dr-grpo": "Dr. GRPO: no std normalization, token sums over a fixed length budget, no KL.",
    "grpo-t": "GRPO with a token-mean loss and no KL.",
    "grpo-scr": "GRPO with sequence-mean loss, clip-higher (0.28) and soft overlong shaping, no KL.",
    "grpo-tcr": "Default: GRPO with token-mean loss, clip-higher (0.28) and soft overlong shaping, no KL.",
}

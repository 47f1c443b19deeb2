"""The RL objective's config section: a named preset fills every knob you leave unset.

Registry names (advantage, policy loss, group filter, aggregation, KL estimator) are
checked when the config is built, with a close-match suggestion. The knobs keep the
parameter names of the registered functions (``whiten_advantages`` is the one exception),
so :meth:`AlgorithmConfig.advantage_params` and its siblings hand each function exactly
its own parameters. ``agentic_rl.algorithms`` (torch) is imported inside the validators
and methods only, so importing the config stays light.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agentic_rl.config.base import Section


class AlgorithmConfig(Section):
    """The RL objective. ``preset`` fills every field you leave unset (see
    ``agentic_rl.algorithms.PRESETS``); explicit fields win."""

    preset: str = "grpo-tcr"
    """A name in agentic_rl.algorithms.PRESETS: grpo, dr-grpo, grpo-t, grpo-scr, grpo-tcr (default: token-level loss, clip-higher, overlong shaping, no KL), ppo, reinforce++, rloo, dapo, mt-grpo, gigpo, starpo-s, gspo, cispo, ..."""
    advantage: str
    """Advantage estimator name in the registry (grpo, rloo, gae, reinforce++, opo, grpo-passk, remax, ...)."""
    policy_loss: str
    """Policy loss name in the registry: ppo-clip (PPO's clipped surrogate with clip-higher and dual clip), gspo, gspo-token, cispo, sapo, clip-cov, kl-cov, gpg, reinforce."""
    normalize_by_std: bool
    """GRPO: divide by the group's reward std (False = Dr. GRPO)."""
    clip_low: float = Field(ge=0.0, lt=1.0)
    """Lower clip range: the ratio is clipped below at 1 - clip_low (ppo-clip, clip-cov)."""
    clip_high: float = Field(ge=0.0)
    """Upper clip range: the ratio is clipped above at 1 + clip_high (clip-higher: > clip_low; ppo-clip, clip-cov)."""
    clip_ratio_c: float | None = Field(gt=1.0)
    """Dual-clip bound for negative advantages (None = off)."""
    aggregation: str
    """How per-token losses become one number: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm."""
    kl_coef: float = Field(ge=0.0)
    """Weight of the KL-to-reference loss term (0 = no reference model)."""
    kl_estimator: str
    """KL estimator: k1, k2, k3."""
    overlong_buffer: int = Field(ge=0)
    """Soft overlong punishment: tokens before the length limit where the penalty ramps to -1 (0 = off)."""
    rollout: Literal["group", "arpo"] = "group"
    """How a task's trajectories are sampled: group (group_size independent samples) or arpo (entropy-based branching, see the arpo section; group_size is its budget M)."""
    kl_in_reward: bool
    """Subtract kl_coef * KL per sampled token from the token rewards (REINFORCE++, classic PPO) instead of a KL loss term."""
    gamma: float = Field(ge=0.0, le=1.0)
    """Discount over sampled tokens (GAE, REINFORCE++) or over turns (GiGPO step returns)."""
    lam: float = Field(ge=0.0, le=1.0)
    """GAE lambda (PPO)."""
    whiten_advantages: bool
    """PPO: whiten GAE advantages over the batch's sampled tokens."""
    critic: Literal["none", "shared", "separate"]
    """Learned value function: none, a value head on the policy backbone (shared), or a separate copy of the initial model with its own head."""
    value_loss_coef: float = Field(ge=0.0)
    """Weight of the value loss (with a shared critic it also shapes the backbone)."""
    value_clip: float = Field(ge=0.0)
    """Value clipping range around the values at sampling time (0 = plain squared error)."""
    critic_lr: float = Field(gt=0.0)
    """Learning rate of the critic (value head, and the separate backbone)."""
    group_filter: str
    """Which sampled groups enter the update: none (all), zero-variance (DAPO's non-zero reward variance), or top-std (StarPO-S's top keep_fraction by reward std)."""
    keep_fraction: float = Field(gt=0.0, le=1.0)
    """top-std filter: fraction of groups kept."""
    max_generation_rounds: int = Field(ge=1)
    """Dynamic sampling: generation rounds per step while filtered groups fill fewer than tasks_per_step (1 = no resampling)."""
    step_advantage_weight: float = Field(ge=0.0)
    """GiGPO: weight of the step-level (anchor-state) advantage."""
    tool_turn_reward: float
    """Per-turn process reward for a turn whose tool calls all ran (added to the env's info["turn_reward"]; MT-GRPO's tool-execution reward)."""
    gspo_clip_low: float = Field(3e-4, ge=0.0, lt=1.0)
    """gspo, gspo-token: the sequence ratio exp(mean log-ratio) is clipped below at 1 - gspo_clip_low (GSPO paper: 3e-4)."""
    gspo_clip_high: float = Field(4e-4, ge=0.0)
    """gspo, gspo-token: the sequence ratio is clipped above at 1 + gspo_clip_high (GSPO paper: 4e-4)."""
    cispo_clip_low: float | None = Field(None, ge=0.0, lt=1.0)
    """cispo: the stop-gradient IS weight is clipped below at 1 - cispo_clip_low (None = no lower bound, as MiniMax-M1)."""
    cispo_clip_high: float = Field(0.2, ge=0.0)
    """cispo: the IS weight is clipped above at 1 + cispo_clip_high (verl's example; the paper tunes it without stating it)."""
    sapo_tau_pos: float = Field(1.0, gt=0.0)
    """sapo: gate temperature for tokens with a positive advantage."""
    sapo_tau_neg: float = Field(1.05, gt=0.0)
    """sapo: gate temperature for the other tokens (above sapo_tau_pos: negative updates fade faster)."""
    clip_cov_ratio: float = Field(2e-4, gt=0.0, le=1.0)
    """clip-cov: fraction of a micro-batch's tokens whose gradient is detached (at least one)."""
    clip_cov_lb: float = 1.0
    """clip-cov: only tokens whose covariance (A - mean A)(log pi - mean log pi) is above this are candidates."""
    clip_cov_ub: float = 5.0
    """clip-cov: ... and below this."""
    kl_cov_ratio: float = Field(2e-4, gt=0.0, le=1.0)
    """kl-cov: fraction of a micro-batch's tokens (the highest covariance, at least one) that get the KL penalty."""
    kl_cov_coef: float = Field(0.1, ge=0.0)
    """kl-cov: weight of the |log-ratio| penalty on those tokens."""
    rollout_correction: Literal["auto", "none", "tis", "mis", "seq-tis", "seq-mis", "decoupled"] = "auto"
    """Importance weights between the trainer's pre-update log-probs and the sampler's (agentic_rl.algorithms.correction): tis = min(ratio, correction_cap) per token, mis = drop tokens whose ratio leaves [correction_low, correction_high], seq-* = the same on the sequence's geometric-mean ratio, decoupled = AReaL's decoupled PPO (the ratio itself, 0 above correction_cap); auto = tis when the sampler's precision or weights differ from the trainer's (bf16-mixed, a separate engine), else none."""
    old_logprobs: Literal["auto", "recompute", "sampler"] = "auto"
    """The pre-update log-probs that the ratio of a batch's second and later updates divides by (the first update's are the current ones): recompute = one more forward pass over the batch before updating; sampler = the log-probs the sampler recorded with each token (the same numbers when it samples with the trainer's own weights at the trainer's precision: no extra pass); auto = sampler exactly in that case (the in-process hf engine without its own copy, not bf16-mixed), else recompute."""
    correction_cap: float = Field(2.0, ge=1.0)
    """tis / seq-tis: the truncation bound C of the importance weight; decoupled: weights above it drop the token."""
    correction_low: float = Field(0.5, ge=0.0, le=1.0)
    """mis / seq-mis: weights below this drop the token (sequence)."""
    correction_high: float = Field(2.0, ge=1.0)
    """mis / seq-mis: weights above this drop the token (sequence)."""

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        """The preset's values under the fields given (a field given as None counts as unset)."""
        if not isinstance(data, dict):
            return data
        from agentic_rl.algorithms import PRESETS, unknown_name

        preset = data.get("preset", cls.model_fields["preset"].default)
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ValueError(f"preset: {unknown_name('preset', preset, PRESETS)}")
        return {
            **PRESETS[preset],
            **{key: value for key, value in data.items() if value is not None or key not in PRESETS[preset]},
        }

    @model_validator(mode="after")
    def _known_names(self) -> AlgorithmConfig:
        from agentic_rl.algorithms import (
            ADVANTAGES,
            AGGREGATIONS,
            GROUP_FILTERS,
            KL_ESTIMATORS,
            POLICY_LOSSES,
            unknown_name,
        )

        for field, kind, known in (
            ("advantage", "advantage estimator", ADVANTAGES),
            ("policy_loss", "policy loss", POLICY_LOSSES),
            ("group_filter", "group filter", GROUP_FILTERS),
            ("aggregation", "aggregation", AGGREGATIONS),
            ("kl_estimator", "KL estimator", KL_ESTIMATORS),
        ):
            if getattr(self, field) not in known:
                raise ValueError(f"{field}: {unknown_name(kind, getattr(self, field), sorted(known))}")
        if self.advantage == "gae" and self.critic == "none":
            raise ValueError("critic: the gae advantage needs a critic ('shared' or 'separate')")
        if self.clip_cov_ub <= self.clip_cov_lb:
            raise ValueError(f"clip_cov_ub: must be above clip_cov_lb ({self.clip_cov_lb}), got {self.clip_cov_ub}")
        return self

    def knobs(self) -> dict[str, Any]:
        """Every numeric and boolean knob under the parameter names of the registered
        functions (``whiten_advantages`` -> ``whiten``); the functions' names are left out."""
        knobs = self.model_dump(
            exclude={
                "preset",
                "advantage",
                "policy_loss",
                "group_filter",
                "rollout",
                "critic",
                "rollout_correction",
                "old_logprobs",
            }
        )
        knobs["whiten"] = knobs.pop("whiten_advantages")
        return knobs

    def advantage_params(self) -> dict[str, Any]:
        """The keyword parameters of the chosen advantage estimator, from this section."""
        from agentic_rl.algorithms import ADVANTAGES

        return ADVANTAGES.params_for(self.advantage, self.knobs())

    def policy_loss_params(self) -> dict[str, Any]:
        """The keyword parameters of the chosen policy loss (clip ranges, aggregation, ...),
        from this section; the trainer adds the batch normalisers."""
        from agentic_rl.algorithms import POLICY_LOSSES

        return POLICY_LOSSES.params_for(self.policy_loss, self.knobs())

    def group_filter_params(self) -> dict[str, Any]:
        """The keyword parameters of the chosen group filter, from this section."""
        from agentic_rl.algorithms import GROUP_FILTERS

        return GROUP_FILTERS.params_for(self.group_filter, self.knobs())

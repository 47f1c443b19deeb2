"""The RL objective's config section: which registered functions compute the advantage,
the policy loss and the group filter, each with its own parameters, plus the KL term, the
critic and the rollout correction.

``advantage``, ``policy_loss`` and ``group_filter`` are ``{name, ...parameters}``: the
parameters are checked against the registered function's signature (names, types and the
ranges its annotations carry) and the function's defaults are the only defaults; a plain
string is the name alone. A named preset (``agentic_rl.algorithms.PRESETS``) fills what you
leave unset; its ``algorithm`` part is applied here, its ``reward`` and ``rl`` parts by the
training config. ``agentic_rl.algorithms`` (torch) is imported inside the validators and
methods only, so importing the config stays light.
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from agentic_rl.config.base import Section, expand_shorthand
from agentic_rl.errors import closest, unknown_name

DEFAULT_PRESET = "grpo-tcr"

# Policy-loss parameters the trainer supplies from other knobs (``algorithm.aggregation``)
# and from the batch (its normalisers): never set under ``policy_loss``.
TRAINER_SUPPLIED = ("aggregation", "num_tokens", "num_sequences", "norm_length")


def function_registry(kind: str):
    """The registry of a ``{name, ...parameters}`` slot's functions (``ADVANTAGES``, ...)."""
    from agentic_rl import algorithms

    return {
        "advantage": algorithms.ADVANTAGES,
        "policy_loss": algorithms.POLICY_LOSSES,
        "group_filter": algorithms.GROUP_FILTERS,
    }[kind]


def function_names(kind: str) -> list[str]:
    """The registered names of ``kind`` (advantage, policy_loss, group_filter)."""
    return sorted(function_registry(kind))


def function_params(kind: str, name: str) -> dict[str, inspect.Parameter]:
    """The parameters a config may set for the registered function ``name`` of ``kind``
    (advantage, policy_loss, group_filter): its keyword parameters after the inputs,
    without those the trainer supplies."""
    registry = function_registry(kind)
    accepted = registry.params(name) or ()
    signature = inspect.signature(registry.lookup(name)).parameters
    return {key: signature[key] for key in accepted if key not in TRAINER_SUPPLIED}


class FunctionSpec(BaseModel):
    """``{name, ...parameters}`` of one registered function. After validation every
    parameter is present: the given ones checked and converted, the rest at the function's
    defaults (so a saved config shows what ran)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)
    kind: ClassVar[str]
    name: str

    @model_validator(mode="before")
    @classmethod
    def _name_alone(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _check_params(self) -> FunctionSpec:
        registry = function_registry(self.kind)
        if self.name not in registry:
            raise ValueError(f"name: {unknown_name(registry.kind, self.name, sorted(registry))}")
        params = function_params(self.kind, self.name)
        hints = typing.get_type_hints(registry.lookup(self.name), include_extras=True)
        for key, value in list((self.model_extra or {}).items()):
            if key not in params:
                known = ", ".join(params) or "none"
                raise ValueError(
                    f"{registry.kind} {self.name!r} takes no parameter {key!r}{closest(key, list(params))}; its parameters: {known}"
                )
            try:
                self.model_extra[key] = TypeAdapter(hints[key]).validate_python(value)
            except ValidationError as error:
                detail = error.errors()[0]["msg"]
                raise ValueError(f"{key}: {detail[0].lower() + detail[1:]} (got {value!r})") from None
        given = dict(self.model_extra)
        self.model_extra.clear()  # refilled in the signature's order, defaults where not given
        self.model_extra.update({key: given.get(key, parameter.default) for key, parameter in params.items()})
        return self

    @property
    def params(self) -> dict[str, Any]:
        """The function's keyword arguments."""
        return dict(self.model_extra or {})


class AdvantageSpec(FunctionSpec):
    """An advantage estimator of ``agentic_rl.algorithms.ADVANTAGES`` and its parameters."""

    kind: ClassVar[str] = "advantage"
    name: str = "grpo"
    """grpo, rloo, gae, reinforce++, reinforce++-baseline, remax, opo, grpo-passk, mt-grpo, gigpo."""


class PolicyLossSpec(FunctionSpec):
    """A policy loss of ``agentic_rl.algorithms.POLICY_LOSSES`` and its parameters (the
    aggregation is ``algorithm.aggregation``)."""

    kind: ClassVar[str] = "policy_loss"
    name: str = "ppo-clip"
    """ppo-clip (PPO's clipped surrogate with clip-higher and dual clip), gspo, gspo-token, cispo, sapo, clip-cov, kl-cov, gpg, reinforce."""


class GroupFilterSpec(FunctionSpec):
    """A group filter of ``agentic_rl.algorithms.GROUP_FILTERS`` and its parameters."""

    kind: ClassVar[str] = "group_filter"
    name: str = "none"
    """none (every group), zero-variance (DAPO: groups whose rewards differ), top-std (StarPO-S: the top keep_fraction by reward std)."""


class KLConfig(Section):
    """The KL penalty to a frozen copy of the initial policy (off at coef 0)."""

    coef: float = Field(0.0, ge=0.0)
    """Weight of the KL penalty (0 = no reference model)."""
    estimator: str = "k3"
    """KL estimator: k1, k2, k3."""
    in_reward: bool = False
    """Subtract coef * KL per sampled token from the token rewards (REINFORCE++, classic PPO) instead of a loss term."""
    reference: Literal["auto", "fp32", "bf16", "cpu"] = "auto"
    """The reference copy: fp32 = float32 on the policy's device, bf16 = bf16 there (half the memory; float32 log-probs), cpu = float32 on the CPU (for tight GPU memory); auto = bf16 when precision is bf16-mixed, else fp32. With LoRA the reference is the policy with adapters disabled (no copy)."""

    @model_validator(mode="before")
    @classmethod
    def _coef_alone(cls, data: Any) -> Any:
        return {"coef": data} if isinstance(data, int | float) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _known_estimator(self) -> KLConfig:
        from agentic_rl.algorithms import KL_ESTIMATORS

        if self.estimator not in KL_ESTIMATORS:
            raise ValueError(f"estimator: {unknown_name('KL estimator', self.estimator, KL_ESTIMATORS)}")
        return self


class CriticConfig(Section):
    """A learned value function (PPO, StarPO-S); a plain string is the kind alone."""

    kind: Literal["none", "shared", "separate"] = "none"
    """none, a value head on the policy backbone (shared), or a separate copy of the initial model with its own head."""
    value_loss_coef: float = Field(0.5, ge=0.0)
    """Weight of the value loss (with a shared critic it also shapes the backbone)."""
    value_clip: float = Field(0.2, ge=0.0)
    """Value clipping range around the values at sampling time (0 = plain squared error)."""
    lr: float = Field(1e-5, gt=0.0)
    """Learning rate of the critic (value head, and the separate backbone)."""

    @model_validator(mode="before")
    @classmethod
    def _kind_alone(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data


class CorrectionConfig(Section):
    """Importance weights between the trainer's pre-update log-probs and the sampler's
    (``agentic_rl.algorithms.correction``); a plain string is the kind alone."""

    kind: Literal["auto", "none", "tis", "mis", "seq-tis", "seq-mis", "decoupled"] = "auto"
    """tis = min(ratio, cap) per token, mis = drop tokens whose ratio leaves [low, high], seq-* = the same on the sequence's geometric-mean ratio, decoupled = AReaL's decoupled PPO (the ratio itself, 0 above cap); auto = tis when the sampler's precision or weights differ from the trainer's (bf16-mixed, a separate engine), else none."""
    cap: float = Field(2.0, ge=1.0)
    """tis / seq-tis: the truncation bound C of the importance weight; decoupled: weights above it drop the token."""
    low: float = Field(0.5, ge=0.0, le=1.0)
    """mis / seq-mis: weights below this drop the token (sequence)."""
    high: float = Field(2.0, ge=1.0)
    """mis / seq-mis: weights above this drop the token (sequence)."""

    @model_validator(mode="before")
    @classmethod
    def _kind_alone(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data


SLOTS = ("advantage", "policy_loss", "group_filter")
"""The ``{name, ...parameters}`` fields of :class:`AlgorithmConfig`."""


def merge_preset(preset: dict[str, Any], given: dict[str, Any], prefix: str = "algorithm.") -> dict[str, Any]:
    """``given`` over ``preset`` (nested dicts merge; shorthand values expand first). A value
    given as None counts as unset, except for a function's parameter the preset does not set
    (where None can be a value: ``clip_ratio_c``). A ``{name, ...}`` slot the user names differently from the
    preset takes none of the preset's parameters for it (they were meant for another function)."""
    merged = {key: expand_shorthand(prefix + key, value) for key, value in preset.items()}
    in_slot = prefix.rstrip(".").rsplit(".", 1)[-1] in SLOTS
    for key, value in given.items():
        base, value = merged.get(key), expand_shorthand(prefix + key, value)
        if isinstance(base, dict) and isinstance(value, dict):
            if key in SLOTS and value.get("name", base.get("name")) != base.get("name"):
                merged[key] = value
            else:
                merged[key] = merge_preset(base, value, f"{prefix}{key}.")
        elif value is not None or (in_slot and key not in merged):
            merged[key] = value
    return merged


class AlgorithmConfig(Section):
    """The RL objective. ``preset`` fills what you leave unset (see
    ``agentic_rl.algorithms.PRESETS``); explicit values win."""

    preset: str = DEFAULT_PRESET
    """A name in agentic_rl.algorithms.PRESETS: grpo, dr-grpo, grpo-t, grpo-scr, grpo-tcr (default: token-level loss, clip-higher, overlong shaping, no KL), ppo, reinforce++, rloo, dapo, mt-grpo, gigpo, starpo-s, gspo, cispo, ..."""
    advantage: AdvantageSpec = Field(default_factory=AdvantageSpec)
    """The advantage estimator: {name, ...its parameters} (a plain name is the estimator at its defaults)."""
    policy_loss: PolicyLossSpec = Field(default_factory=PolicyLossSpec)
    """The policy loss: {name, ...its parameters} (e.g. {name: ppo-clip, clip_high: 0.28})."""
    aggregation: str = "token-mean"
    """How per-token losses (policy, KL, value) become one number: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm."""
    group_filter: GroupFilterSpec = Field(default_factory=GroupFilterSpec)
    """Which sampled groups enter the update: {name, ...its parameters}."""
    kl: KLConfig = Field(default_factory=KLConfig)
    """The KL penalty to the initial policy (a number is the coefficient alone)."""
    critic: CriticConfig = Field(default_factory=CriticConfig)
    """A learned value function (a plain string is its kind)."""
    correction: CorrectionConfig = Field(default_factory=CorrectionConfig)
    """The rollout correction between the sampler's and the trainer's log-probs."""
    role_weights: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] | Literal["balanced"] = Field(
        default_factory=dict
    )
    """Episodes with several roles: how much each role's samples weigh in the policy loss (its advantages are scaled by the weight). {role: weight}: roles not named weigh 1; balanced: every role weighs as much in all as every other whatever its length (under token-mean a planner's 10-token replies otherwise count a sixth of a solver's 60): a role's weight is the roles' mean count of what the aggregation averages over (tokens; sequences for seq-mean-token-mean) divided by its own, so the total is unchanged; {}: every token weighs the same. Metrics: role_weight@<role>."""
    old_logprobs: Literal["auto", "recompute", "sampler"] = "auto"
    """The pre-update log-probs that the ratio of a batch's second and later updates divides by (the first update's are the current ones): recompute = one more forward pass over the batch before updating; sampler = the log-probs the sampler recorded with each token (the same numbers when it samples with the trainer's own weights at the trainer's precision: no extra pass); auto = sampler exactly in that case (the in-process hf engine without its own copy, not bf16-mixed), else recompute."""

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        """The preset's ``algorithm`` values under those given (a value given as None counts as unset)."""
        if not isinstance(data, dict):
            return data
        from agentic_rl.algorithms import PRESETS

        preset = data.get("preset", DEFAULT_PRESET)
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ValueError(f"preset: {unknown_name('preset', preset, PRESETS)}")
        return merge_preset(PRESETS[preset].get("algorithm", {}), data)

    @model_validator(mode="after")
    def _known_names(self) -> AlgorithmConfig:
        from agentic_rl.algorithms import AGGREGATIONS

        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation: {unknown_name('aggregation', self.aggregation, AGGREGATIONS)}")
        loss = self.policy_loss.params
        if self.policy_loss.name == "clip-cov" and loss["cov_ub"] <= loss["cov_lb"]:
            raise ValueError(f"policy_loss: cov_ub must be above cov_lb ({loss['cov_lb']}), got {loss['cov_ub']}")
        if self.advantage.name == "gae" and self.critic.kind == "none":
            raise ValueError("critic: the gae advantage needs a critic (kind 'shared' or 'separate')")
        return self

    def return_params(self) -> dict[str, float]:
        """gamma and lam of the critic's GAE return targets: the advantage's own when it is
        gae, else the gae estimator's defaults."""
        params = self.advantage.params if self.advantage.name == "gae" else {}
        defaults = function_params("advantage", "gae")
        return {key: params.get(key, defaults[key].default) for key in ("gamma", "lam")}

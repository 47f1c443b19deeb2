"""Typed configuration with validation: one flat section per stage.

Every field has a one-line docstring. Bad values fail with one line naming the key and
what was expected (``ConfigError``), which the CLI prints without a traceback.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentic_rl.rollout.engine import RolloutLimits


class ConfigError(ValueError):
    """A user mistake in configuration: one clear line."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


class ModelConfig(_Section):
    name: str = "smollm2-135m"
    """Built-in model name (smollm2-135m, tiny-random), local Hugging Face folder, or hub id."""
    device: str = "auto"
    """"auto" (GPU when present, else CPU), "cpu", "cuda", "cuda:1", ..."""


class EnvConfig(BaseModel):
    """``name`` plus any options of that env's factory (e.g. ``few_shot``, ``digits``)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)
    name: str = "arithmetic"
    """Registered env name (see ``agentic-rl envs``)."""

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class BackendConfig(_Section):
    kind: Literal["hf", "openai"] = "hf"
    """hf: the model in this process; openai: any OpenAI-compatible chat endpoint."""
    batch_size: int = Field(32, ge=1)
    """Most sequences the hf backend decodes in one batch."""
    base_url: str | None = None
    """Endpoint base URL for kind=openai, e.g. http://127.0.0.1:8000/v1."""
    api_key: str | None = None
    """API key for kind=openai (default: the OPENAI_API_KEY variable)."""
    max_concurrency: int = Field(8, ge=1)
    """Parallel requests for kind=openai."""


class RolloutConfig(_Section):
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold."""
    max_new_tokens: int = Field(256, ge=1)
    """Most tokens sampled in one assistant turn."""
    max_total_tokens: int = Field(4096, ge=16)
    """Most tokens in a whole trajectory; reaching it truncates (max_tokens)."""
    max_turns: int = Field(16, ge=1)
    """Engine-side cap on assistant turns (envs have their own max_turns too)."""
    timeout_s: float = Field(1800.0, gt=0)
    """Wall-clock limit per trajectory."""

    def limits(self, seed: int | None) -> RolloutLimits:
        return RolloutLimits(seed=seed, **self.model_dump())


class EvalConfig(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to evaluate."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment and its options."""
    backend: BackendConfig = Field(default_factory=BackendConfig)
    """Where generation runs."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling and episode limits."""
    num_tasks: int = Field(32, ge=1)
    """Held-out tasks to evaluate (the first N of the split)."""
    k: int = Field(4, ge=1)
    """The k of avg@k / pass@k / maj@k."""
    num_samples: int | None = Field(None, ge=1)
    """Samples per task (default k); more than k lowers the variance of pass@k."""
    split: str = "test"
    """Task split, passed to envs that have splits."""
    seed: int = 0
    """Sampling seed: the same seed gives the same samples."""
    output: str | None = None
    """Write the JSON result here."""

    @model_validator(mode="after")
    def _samples_cover_k(self) -> EvalConfig:
        if self.num_samples is not None and self.num_samples < self.k:
            raise ValueError(f"num_samples ({self.num_samples}) must be at least k ({self.k})")
        return self

    @property
    def samples_per_task(self) -> int:
        return self.num_samples or self.k


def _format_validation_error(error: ValidationError) -> str:
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "config"
    if first["type"] == "extra_forbidden":
        parent, _, leaf = key.rpartition(".")
        section = _section_for(error.title, parent)
        known = list(section.model_fields) if section else []
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f"; did you mean {'.'.join(filter(None, [parent, close[0]]))!r}?" if close else (f"; known keys: {', '.join(known)}" if known else "")
        return f"unknown config key {key!r}{hint}"
    value = first.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict) else ""
    return f"{key}: {first['msg'][0].lower() + first['msg'][1:]}{shown}"


def _section_for(title: str, dotted: str) -> type[BaseModel] | None:
    models = {cls.__name__: cls for cls in (EvalConfig,)}
    model: Any = models.get(title)
    for part in filter(None, dotted.split(".")):
        field = model.model_fields.get(part) if model else None
        model = field.annotation if field else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    return model


def parse_assignment(assignment: str) -> tuple[list[str], Any]:
    """``"rollout.temperature=0.7"`` -> (["rollout", "temperature"], 0.7); values are YAML scalars."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. rollout.temperature=0.7")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_assignments(data: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    for assignment in assignments:
        path, value = parse_assignment(assignment)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {assignment!r}: {part!r} is not a section")
            node = child
        node[path[-1]] = value
    return data


def build(model_cls: type[BaseModel], data: dict[str, Any]):
    """Validate ``data`` into ``model_cls``, turning pydantic errors into one ConfigError line."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error)) from None

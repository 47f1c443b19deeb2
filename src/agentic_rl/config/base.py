"""What every config section shares: the error type, the strict section base, the knob
types used by several sections, and building a section from a dict and ``--set``
assignments with one-line errors.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentic_rl.errors import ConfigError  # re-exported: the CLI and users catch agentic_rl.config.ConfigError


class Section(BaseModel):
    """A config section: unknown keys are errors, assignments are validated, and each
    field's docstring is its description."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


# Knobs that several sections share, defined once: the type and range (and the
# description where every section words it the same); each section picks its default.
Epochs = Annotated[int, Field(ge=1)]
LearningRate = Annotated[float, Field(gt=0)]
BatchSize = Annotated[int, Field(ge=1)]
MicroBatchTokens = Annotated[
    int, Field(ge=64, description="Most padded tokens per forward/backward pass (gradient accumulation beyond).")
]
MaxLength = Annotated[int, Field(ge=16)]
WarmupSteps = Annotated[int, Field(ge=0, description="Optimizer steps of linear warmup.")]
MaxGradNorm = Annotated[float, Field(gt=0, description="Gradient clipping by global norm.")]
NumTasks = Annotated[int, Field(ge=1)]
SamplesPerTask = Annotated[int, Field(ge=1)]
Temperature = Annotated[float, Field(ge=0.0)]
TaskOffset = Annotated[int, Field(ge=0)]


def format_validation_error(error: ValidationError, model_cls: type[BaseModel]) -> str:
    """The first error of ``error`` as one line naming the dotted key, with a close-match
    suggestion for an unknown key. A validator's ValueError that starts with a field name
    (``"critic: ..."``) is reported under that field's dotted key."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    key = ".".join(loc) or "config"
    if first["type"] == "extra_forbidden":
        parent, _, leaf = key.rpartition(".")
        section = _section_for(model_cls, parent)
        known = list(section.model_fields) if section else []
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = (
            f"; did you mean {'.'.join(filter(None, [parent, close[0]]))!r}?"
            if close
            else (f"; known keys: {', '.join(known)}" if known else "")
        )
        return f"unknown config key {key!r}{hint}"
    if first["type"] == "value_error":
        message = str(first["ctx"]["error"])
        named, sep, rest = message.partition(": ")
        parent, _, leaf = ".".join([*loc, named]).rpartition(".")
        section = _section_for(model_cls, parent)
        # Sections that take extra keys (a function's parameters) name those too.
        known = section is not None and (leaf in section.model_fields or section.model_config.get("extra") == "allow")
        if sep and known and leaf.replace("_", "").isalnum():
            return f"{'.'.join(filter(None, [parent, leaf]))}: {rest}"
        if not loc and sep and " " not in named:
            return message  # a root validator names the (dotted) key itself
        return f"{key}: {message}"
    value = first.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict) else ""
    return f"{key}: {first['msg'][0].lower() + first['msg'][1:]}{shown}"


def _section_for(model_cls: type[BaseModel], dotted: str) -> type[BaseModel] | None:
    """The section class at ``dotted`` (``"sft.train"``) inside ``model_cls``, or None."""
    model: Any = model_cls
    for part in filter(None, dotted.split(".")):
        field = model.model_fields.get(part) if model else None
        model = field.annotation if field else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    return model


SHORTHAND: dict[str, str] = {
    "algorithm.advantage": "name",
    "algorithm.policy_loss": "name",
    "algorithm.group_filter": "name",
    "algorithm.critic": "kind",
    "algorithm.correction": "kind",
    "algorithm.kl": "coef",
}
"""Sections a single value may stand for (``algorithm.critic: shared`` = ``{kind: shared}``):
dotted key -> the field the value fills. Merging a section over such a value expands it first."""


def expand_shorthand(dotted: str, value: Any) -> Any:
    """``value`` as its section when ``dotted`` takes a shorthand (a bool is never one)."""
    if dotted in SHORTHAND and value is not None and not isinstance(value, dict | bool):
        return {SHORTHAND[dotted]: value}
    return value


def _assign(dotted: str, old: Any, value: Any) -> Any:
    """A shorthand value set over its section: it sets that one field (a function's name
    that changes drops the old function's parameters); anything else replaces."""
    new = expand_shorthand(dotted, value)
    if not (isinstance(old, dict) and isinstance(new, dict) and dotted in SHORTHAND):
        return value
    field = SHORTHAND[dotted]
    return new if field == "name" and old.get("name") != new["name"] else {**old, **new}


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
        for depth, part in enumerate(path[:-1]):
            child = node[part] = expand_shorthand(".".join(path[: depth + 1]), node.setdefault(part, {}))
            if not isinstance(child, dict):
                raise ConfigError(f"--set {assignment!r}: {part!r} is not a section")
            node = child
        node[path[-1]] = _assign(".".join(path), node.get(path[-1]), value)
    return data


def build(model_cls: type[BaseModel], data: dict[str, Any]):
    """Validate ``data`` into ``model_cls``, turning pydantic errors into one ConfigError line."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, model_cls)) from None

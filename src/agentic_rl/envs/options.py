"""Env options checked against their factory's signature: the types written there are the
options' types (and its defaults their defaults), so a wrong type fails with one line
naming the option before any env is built, instead of deep inside the factory."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError


@functools.cache
def option_types(factory: Callable[..., Any]) -> dict[str, TypeAdapter]:
    """Option name -> a validator of its annotated type, for the annotations pydantic can
    check and word well (an option typed with an arbitrary class, a union of several types,
    or not typed, is left to the factory's own checks, which name what it accepts)."""
    try:
        hints = typing.get_type_hints(factory)
    except (NameError, TypeError):
        return {}  # annotations that do not resolve: the factory checks its own values
    adapters = {}
    for name, parameter in inspect.signature(factory).parameters.items():
        if name not in hints or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        members = [arg for arg in typing.get_args(hints[name]) if arg is not type(None)]
        if typing.get_origin(hints[name]) in (typing.Union, types.UnionType) and len(members) > 1:
            continue
        try:
            adapters[name] = TypeAdapter(hints[name])
        except (PydanticSchemaGenerationError, TypeError):
            continue
    return adapters


def check_option_types(env: str, factory: Callable[..., Any], options: dict[str, Any]) -> None:
    """ValueError (one line) for the first option whose value does not fit its annotated type."""
    adapters = option_types(factory)
    for name, value in options.items():
        if name not in adapters:
            continue
        try:
            adapters[name].validate_python(value)
        except ValidationError as error:
            detail = error.errors()[0]["msg"]
            raise ValueError(f"env {env!r} option {name}: {detail[0].lower() + detail[1:]} (got {value!r})") from None

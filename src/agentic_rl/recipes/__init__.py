"""Built-in YAML recipes: ``agentic-rl train NAME`` or a path to your own YAML."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.config import ConfigError


def _folder():
    return resources.files(__name__)


def recipe_names() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in _folder().iterdir() if p.name.endswith(".yaml"))


def load_recipe(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(name, data) of a built-in recipe name or a YAML file path."""
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise ConfigError(f"recipe file {name_or_path!r} does not exist")
        text, name = path.read_text(), path.stem
    else:
        if name_or_path not in recipe_names():
            close = difflib.get_close_matches(name_or_path, recipe_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown recipe {name_or_path!r}{hint}; recipes: {', '.join(recipe_names())}")
        text, name = (_folder() / f"{name_or_path}.yaml").read_text(), name_or_path
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"recipe {name_or_path!r}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {name_or_path!r}: expected a mapping of config keys at the top level")
    return name, data


def describe(name: str) -> str:
    return str(load_recipe(name)[1].get("description", ""))

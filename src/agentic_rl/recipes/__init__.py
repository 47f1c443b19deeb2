"""Built-in YAML recipes: ``agentic-rl train NAME`` or a path to your own YAML.

A recipe may start from another with ``base: NAME_OR_PATH`` (a built-in recipe name, or a
YAML path relative to the recipe's own file): its mapping is deep-merged over the base's
(sections merged key by key, lists and other values replaced). ``description`` is never
inherited: it describes the recipe that states it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.config import ConfigError
from agentic_rl.config.base import expand_shorthand
from agentic_rl.errors import closest


def _folder():
    return resources.files(__name__)


def recipe_names() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in _folder().iterdir() if p.name.endswith(".yaml"))


def load_recipe(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(name, data) of a built-in recipe name or a YAML file path, its ``base`` chain resolved."""
    path = Path(name_or_path)
    name = path.stem if name_or_path.endswith((".yaml", ".yml")) or path.is_file() else name_or_path
    return name, _resolve(name_or_path, folder=None, chain=[])


def _resolve(name_or_path: str, folder: Path | None, chain: list[tuple[str, str]]) -> dict[str, Any]:
    """The recipe's data merged over its base's; ``folder`` resolves relative paths (None:
    the working directory, as on the command line); ``chain``: (identity, name as written)
    of the recipes that led here."""
    identity, text, file = _read(name_or_path, folder)
    if identity in (seen for seen, _ in chain):
        names = [written for _, written in chain] + [name_or_path]
        raise ConfigError(f"recipe base cycle: {' -> '.join(names)}")
    data = _parse(name_or_path, text)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"recipe {name_or_path!r}: base must be a recipe name or a YAML path, got {base!r}")
    inherited = _resolve(base, file.parent if file else None, [*chain, (identity, name_or_path)])
    inherited.pop("description", None)
    child_env, base_env = data.get("env"), inherited.get("env")
    if (
        isinstance(child_env, dict)
        and isinstance(base_env, dict)
        and child_env.get("name", base_env.get("name")) != base_env.get("name")
    ):
        # Another env's options (arithmetic's phrasing...) mean nothing to this one, and
        # neither do the stage overrides of them (sft.env, eval.env).
        inherited.pop("env")
        for stage in ("sft", "eval"):
            if isinstance(inherited.get(stage), dict):
                inherited[stage].pop("env", None)
    return deep_merge(inherited, data)


def _read(name_or_path: str, folder: Path | None) -> tuple[str, str, Path | None]:
    """(identity for cycle checks, YAML text, file path or None for a built-in recipe)."""
    path = Path(name_or_path) if folder is None else folder / name_or_path
    if name_or_path.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise ConfigError(f"recipe file {str(path)!r} does not exist")
        return str(path.resolve()), path.read_text(), path
    if name_or_path not in recipe_names():
        hint = closest(name_or_path, recipe_names())
        raise ConfigError(f"unknown recipe {name_or_path!r}{hint}; recipes: {', '.join(recipe_names())}")
    return name_or_path, (_folder() / f"{name_or_path}.yaml").read_text(), None


def _parse(name_or_path: str, text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"recipe {name_or_path!r}: invalid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {name_or_path!r}: expected a mapping of config keys at the top level")
    return data


def deep_merge(base: dict[str, Any], override: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A new mapping: ``override`` over ``base``, nested mappings merged key by key (a
    shorthand value such as ``policy_loss: gspo`` expanded first), every other value (lists
    included) replaced."""
    merged = dict(base)
    for key, value in override.items():
        dotted = prefix + key
        old, value = expand_shorthand(dotted, merged.get(key)), expand_shorthand(dotted, value)
        merged[key] = (
            deep_merge(old, value, dotted + ".") if isinstance(value, dict) and isinstance(old, dict) else value
        )
    return merged


def describe(name: str) -> str:
    return str(load_recipe(name)[1].get("description", ""))


def recipe_text(name_or_path: str) -> str:
    """The recipe's YAML as written (its ``base`` unresolved); ConfigError for an unknown name."""
    return _read(name_or_path, None)[1]

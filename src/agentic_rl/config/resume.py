"""What a resumed run may change: ``agentic-rl train --resume RUN_DIR --set KEY=VALUE``.

A run continues from a checkpoint of its own model, optimizer and task schedule, so only
settings that do not change what was already computed may differ: how long it runs, the
learning rate and its schedule, evaluations, tracking and checkpointing.
"""

from __future__ import annotations

import copy
from typing import Any

from agentic_rl.config.base import ConfigError, build
from agentic_rl.config.renamed import MOVED, RETIRED, moved_key
from agentic_rl.config.secrets import holds_redacted_url, is_secret_key, redact_secrets
from agentic_rl.config.sections import TrainConfig

RESUMABLE_KEYS: tuple[str, ...] = (
    "rl.steps",
    "optim.lr",
    "optim.schedule",
    "optim.warmup_steps",
    "eval.*",
    "tracking.*",
    "checkpoint_every",
    "keep_checkpoints",
    "backend.api_key",
)
"""Dotted keys ``--set`` may change on ``--resume``; ``section.*`` allows a whole section."""


def _dotted(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-6}}`` -> ``{"optim.lr": 1e-6}`` (an empty dict stays a key)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_dotted(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _resumable(key: str) -> bool:
    return any(
        key == allowed or (allowed.endswith(".*") and (key + ".").startswith(allowed[:-1]))
        for allowed in RESUMABLE_KEYS
    )


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def resume_config(saved: dict[str, Any], overrides: dict[str, Any] | None) -> tuple[TrainConfig, list[str]]:
    """The config a resumed run continues with: the run's saved config with ``overrides``
    (nested, as ``apply_assignments`` builds them) on top, and one ``key: old -> new`` line
    per changed value. Raises ConfigError naming the first key that may not change mid-run
    (after unknown keys and bad values, which ``build`` reports as for a new run)."""
    saved, retired = _drop_retired(saved)
    old = moved_key(saved)
    if old and old.split(":")[0] in RETIRED:
        key = old.split(":")[0]
        raise ConfigError(
            f"--resume: the run set {key} to {_dotted(saved)[key]} ({RETIRED[key][1]} now: "
            f"{MOVED[key]}); this version cannot continue it: start a new run with {MOVED[key]}"
        )
    if old:
        raise ConfigError(
            f"--resume: the run was written with the flat config of agentic-rl 0.1 ({old.split(' (')[0]}); "
            "this version cannot continue it: start a new run, or resume with agentic-rl 0.1"
        )
    saved_flat, given = _dotted(saved), _dotted(overrides or {})
    # A URL saved with its credentials as *** (config/secrets.py) may be given again in full
    # on --resume, whatever its key: the same URL, only its hidden parts differ.
    restored = {
        key
        for key, value in given.items()
        if holds_redacted_url(saved_flat.get(key)) and redact_secrets(value) == saved_flat[key]
    }
    lost = [key for key, value in saved_flat.items() if holds_redacted_url(value) and key not in given]
    if lost:
        raise ConfigError(
            f"--resume: {lost[0]} was saved with its credentials as *** (run files never hold them); give it again: --set {lost[0]}=URL"
        )
    before = build(TrainConfig, saved)
    if not overrides:
        return before, retired
    config = build(TrainConfig, _merge(saved, overrides))
    for key in given:
        if key not in restored and holds_redacted_url(saved_flat.get(key)):
            raise ConfigError(
                f"--set on --resume: {key} must be the URL the run started with ({saved_flat[key]}, credentials as ***)"
            )
        if not _resumable(key) and key not in restored:
            raise ConfigError(f"--set on --resume: {key} cannot change mid-run (allowed: {', '.join(RESUMABLE_KEYS)})")
    old, new = _dotted(before.model_dump()), _dotted(config.model_dump())
    changed = [_change(key, old.get(key), new[key]) for key in new if new[key] != old.get(key)]
    return config, retired + changed


def _drop_retired(saved: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``saved`` without the retired keys left at their old default (nothing the run set),
    and one line per key dropped."""
    saved, lines = copy.deepcopy(saved), []
    for key, (default, why) in RETIRED.items():
        section, name = key.split(".")
        values = saved.get(section)
        if isinstance(values, dict) and name in values and values[name] == default:
            del values[name]
            lines.append(f"{key}: {default} -> removed ({why})")
    return saved, lines


def _change(key: str, old: Any, new: Any) -> str:
    """One ``key: old -> new`` line, with no secret in it (the line reaches the terminal and logs)."""
    if is_secret_key(key.rsplit(".", 1)[-1]):
        return f"{key}: changed (not shown)"
    old, new = redact_secrets(old), redact_secrets(new)
    if old == new:
        return f"{key}: credentials given again (not shown)"
    return f"{key}: {old!r} -> {new!r}"

"""The metric sinks a config may name and the package each needs (``tracking.sinks``
builds them); checked at config time, before a run starts."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

SINK_PACKAGES: dict[str, tuple[str | None, str]] = {
    "jsonl": (None, ""),
    "tensorboard": ("tensorboard", "pip install tensorboard"),
    "wandb": ("wandb", "pip install wandb"),
    "mlflow": ("mlflow", "pip install mlflow"),
}
"""Metric sink name -> (the package it needs, its install command); ``tracking.sinks`` builds them."""


def package_installed(package: str) -> bool:
    """Whether ``package`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def check_sink_names(names: Iterable[str]) -> list[str]:
    """Normalised (lower-case, deduplicated) sink names; creates nothing, so a config
    validator can call it before a run starts.

    Raises:
        ValueError: one line naming an unknown sink, or a requested sink whose package
            is not installed (with the install command).
    """
    wanted: list[str] = []
    for raw in names:
        name = raw.strip().lower()
        if name not in SINK_PACKAGES:
            raise ValueError(f"unknown metric sink {raw!r}; choose from {', '.join(SINK_PACKAGES)}")
        package, hint = SINK_PACKAGES[name]
        if package is not None and not package_installed(package):
            raise ValueError(f"metric sink {name!r} needs the {package} package, which is not installed ({hint})")
        if name not in wanted:
            wanted.append(name)
    return wanted

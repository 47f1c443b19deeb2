"""Errors shared by every layer: defined below them all, so the env registry can raise a
``ConfigError`` without importing the config models (``agentic_rl.config`` re-exports it)."""

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A user mistake in configuration: one clear line."""


def closest(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` to ``name``, or ``""``."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(kind: str, name: object, known: Iterable[str]) -> str:
    """One-line message for a name not in ``known``, e.g. ``unknown group filter 'top'
    (did you mean 'top-std'?); known: none, top-std, zero-variance``."""
    known = list(known)
    return f"unknown {kind} {name!r}{closest(name, known)}; known: {', '.join(known)}"

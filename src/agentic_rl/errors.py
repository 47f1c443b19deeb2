"""Errors shared by every layer: defined below them all, so the env registry can raise a
``ConfigError`` without importing the config models (``agentic_rl.config`` re-exports it)."""


class ConfigError(ValueError):
    """A user mistake in configuration: one clear line."""

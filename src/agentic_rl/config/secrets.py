"""Secrets never reach a run file: config values under a secret-looking key (an API key, a
token, a secret, a password) are written as ``***``; a resumed run, which reads its
config.yaml back, gets them again from the environment (e.g. OPENAI_API_KEY) or --set."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"

_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "apikey"})


def is_secret_key(name: str) -> bool:
    """``api_key``, ``hf_token``, ``client_secret``, ``password``...; not ``max_new_tokens``
    (whole words only: a count of tokens is no secret)."""
    lowered = str(name).lower()
    return "api_key" in lowered or any(word in _SECRET_WORDS for word in re.split(r"[^a-z0-9]+", lowered))


def redact_secrets(data: Any) -> Any:
    """A copy of ``data`` (nested dicts and lists) with every set value under a secret key
    replaced by ``***``."""
    if isinstance(data, dict):
        return {key: REDACTED if is_secret_key(key) and value not in (None, "") else redact_secrets(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [redact_secrets(value) for value in data]
    return data


def drop_redacted(data: Any) -> Any:
    """A copy of ``data`` without the ``***`` values :func:`redact_secrets` wrote, so their
    defaults (read from the environment) apply again."""
    if isinstance(data, dict):
        return {key: drop_redacted(value) for key, value in data.items() if not (is_secret_key(key) and value == REDACTED)}
    if isinstance(data, list):
        return [drop_redacted(value) for value in data]
    return data

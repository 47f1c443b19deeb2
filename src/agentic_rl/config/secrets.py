"""Secrets never reach a run file: config values under a secret-looking key (an API key, a
token, a secret, a password) are written as ``***``, and so are the credentials inside any
URL value (``https://user:pw@host``, ``?api_key=...``); a resumed run, which reads its
config.yaml back, gets them again from the environment (e.g. OPENAI_API_KEY) or --set."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

REDACTED = "***"

_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "apikey"})
# Query parameters carry credentials under shorter names than config keys do: Google's
# ?key=, S3/Azure presigned ?X-Amz-Signature= / ?sig=, ?auth=.
_URL_SECRET_WORDS = _SECRET_WORDS | {"key", "sig", "signature", "auth", "credential", "credentials"}


def _words(name: str) -> list[str]:
    return re.split(r"[^a-z0-9]+", str(name).lower())


def is_secret_key(name: str) -> bool:
    """``api_key``, ``hf_token``, ``client_secret``, ``password``...; not ``max_new_tokens``
    (whole words only: a count of tokens is no secret)."""
    return "api_key" in str(name).lower() or any(word in _SECRET_WORDS for word in _words(name))


def _is_secret_parameter(name: str) -> bool:
    return is_secret_key(name) or any(word in _URL_SECRET_WORDS for word in _words(unquote_plus(name)))


def _redact_parameters(text: str) -> str:
    """``a=1&api_key=sk-x`` -> ``a=1&api_key=***`` (separators and other pairs kept as written)."""
    pieces = re.split(r"([&;])", text)
    for index, piece in enumerate(pieces):
        name, equals, value = piece.partition("=")
        if equals and value and _is_secret_parameter(name):
            pieces[index] = f"{name}={REDACTED}"
    return "".join(pieces)


def redact_url(value: str) -> str:
    """``value`` with a URL's credentials as ``***``: the user and password of
    ``scheme://user:pw@host`` and each secret-looking query (or fragment) parameter. A
    string that is no ``scheme://host...`` URL comes back unchanged."""
    if "://" not in value:
        return value
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an invalid IPv6 host: not a URL we can take apart
        return value
    if not parts.scheme or not parts.netloc:
        return value
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        # The user name too: some services take the key as the user (https://KEY@host).
        netloc = f"{REDACTED}:{REDACTED}@{host}" if ":" in userinfo else f"{REDACTED}@{host}"
    redacted = (parts.scheme, netloc, parts.path, _redact_parameters(parts.query), _redact_parameters(parts.fragment))
    # Rebuilt only when something was hidden: urlunsplit normalises (e.g. drops an empty "?").
    return value if redacted == tuple(parts) else urlunsplit(redacted)


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_urls(text: str) -> str:
    """``text`` (an error message, a log line) with every URL in it passed through
    :func:`redact_url`: ``POST https://u:pw@host/v1?key=k failed`` -> ``POST https://***:***@host/v1?key=*** failed``."""
    return _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)


def holds_redacted_url(value: Any) -> bool:
    """Whether ``value`` is a URL whose credentials :func:`redact_url` replaced (unusable
    as it is: a resumed run needs it given again)."""
    if not isinstance(value, str) or REDACTED not in value or redact_url(value) != value:
        return False
    parts = urlsplit(value)
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    return REDACTED in userinfo or f"={REDACTED}" in f"{parts.query}&{parts.fragment}"


def redact_secrets(data: Any) -> Any:
    """A copy of ``data`` (nested dicts and lists) with every set value under a secret key
    replaced by ``***``, and the credentials inside any URL string by ``***`` too."""
    if isinstance(data, dict):
        return {
            key: REDACTED if is_secret_key(key) and value not in (None, "") else redact_secrets(value)
            for key, value in data.items()
        }
    if isinstance(data, list | tuple):
        return [redact_secrets(value) for value in data]
    if isinstance(data, str):
        return redact_url(data)
    return data


def drop_redacted(data: Any) -> Any:
    """A copy of ``data`` without the ``***`` values :func:`redact_secrets` wrote, so their
    defaults (read from the environment) apply again."""
    if isinstance(data, dict):
        return {
            key: drop_redacted(value) for key, value in data.items() if not (is_secret_key(key) and value == REDACTED)
        }
    if isinstance(data, list):
        return [drop_redacted(value) for value in data]
    return data

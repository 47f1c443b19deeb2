"""The checks every request to the project's HTTP servers (gateway, retrieval) passes, as a
pure ASGI middleware (``install_guard``), and the bounded JSON reading of their bodies.

Before the body is read: a ``Host`` the server answers to (a loopback server answers only
loopback names, which stops DNS rebinding), the bearer token when one is set, and on POST a
present, bounded ``Content-Length`` with no ``Transfer-Encoding`` (a chunked body would
bypass it). While it is read: the bytes actually received are counted whatever the headers
said, and a body past the cap is answered 413 at once. At most ``max_requests`` requests
are served at a time (more get 503). A failed check answers the server's own JSON error.
"""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from starlette.datastructures import Headers

MAX_JSON_DEPTH = 64
"""Most nested arrays/objects in a request body (deeper bodies are refused, not recursed into)."""


class BodyTooLarge(Exception):
    """Raised by a counted ``receive`` once the body passes the cap (the guard answers 413)."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_shape(value: Any) -> None:
    """ValueError when ``value`` nests arrays/objects past :data:`MAX_JSON_DEPTH` or holds a
    string with a lone surrogate (``"\\ud800"`` is JSON, but no text: tokenizers and UTF-8 refuse it)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("the body must be JSON of valid Unicode text (a lone surrogate)") from None
        elif isinstance(item, (dict, list)):
            if level > MAX_JSON_DEPTH:
                raise ValueError(f"the body must be JSON nested at most {MAX_JSON_DEPTH} deep")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)


def loads_bounded(raw: bytes | str) -> Any:
    """``raw`` parsed as JSON with finite numbers (no NaN, Infinity or overflowing floats), valid
    Unicode strings, nested at most :data:`MAX_JSON_DEPTH` deep; ValueError with one line otherwise."""
    try:
        value = json.loads(raw, parse_float=_finite, parse_constant=_no_constants)
    except RecursionError:
        raise ValueError(f"the body must be JSON nested at most {MAX_JSON_DEPTH} deep") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"the body must be JSON ({error.msg} at position {error.pos})") from None
    except (ValueError, UnicodeDecodeError) as error:  # a number out of range, bad UTF-8
        raise ValueError(f"the body must be JSON ({' '.join(str(error).split())[:120]})") from None
    _check_shape(value)
    return value


def _host(headers: Headers) -> str:
    return (headers.get("host") or "").rsplit(":", 1)[0].strip("[]").lower()


class RequestGuard:
    """The pure ASGI middleware ``install_guard`` adds (see the module docstring)."""

    def __init__(
        self,
        app,
        *,
        token: str | None,
        allowed_hosts: Sequence[str],
        max_body_bytes: int,
        error: Callable[[int, str], Any],
        max_requests: int,
    ) -> None:
        self.app = app
        self.token = token
        self.hosts = {h.lower() for h in allowed_hosts}
        self.max_body_bytes = max_body_bytes
        self.error = error
        self.max_requests = max_requests
        self.in_flight = 0

    def refusal(self, scope) -> tuple[int, str] | None:
        """Why the request is refused before its body is read (status, message), or None."""
        headers = Headers(scope=scope)
        host = _host(headers)
        if "*" not in self.hosts and host not in self.hosts:
            return 400, f"Host {host!r} is not served here"
        if self.token is not None:
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                return 401, "a bearer token is required (Authorization: Bearer <token>)"
        if self.in_flight >= self.max_requests:
            return 503, f"the server is busy ({self.in_flight} requests in flight); retry later"
        length = headers.get("content-length")
        if "transfer-encoding" in headers:
            if length is not None:
                return 400, "a request may not carry both Content-Length and Transfer-Encoding"
            return 411, "Content-Length is required (Transfer-Encoding is not accepted)"
        if scope["method"] == "POST":
            if length is None:
                return 411, "Content-Length is required"
            if not length.isdigit():
                return 400, f"Content-Length must be a non-negative integer, got {length!r}"
            if int(length) > self.max_body_bytes:
                return 413, f"request body too large ({length} bytes; at most {self.max_body_bytes})"
        return None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan
            return await self.app(scope, receive, send)
        refused = self.refusal(scope)
        if refused is not None:
            return await self.error(*refused)(scope, receive, send)
        received, started = 0, False

        async def counted_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise BodyTooLarge
            return message

        async def tracked_send(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        self.in_flight += 1
        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                message = f"request body too large (over {self.max_body_bytes} bytes, whatever the headers said)"
                await self.error(413, message)(scope, receive, send)
        finally:
            self.in_flight -= 1


def install_guard(
    app,
    *,
    token: str | None,
    allowed_hosts: Sequence[str],
    max_body_bytes: int,
    error: Callable[[int, str], Any],
    max_requests: int,
) -> None:
    """Add the request checks (see the module docstring) to ``app`` (a Starlette/FastAPI app);
    a failed check answers ``error(status, message)`` (each server's own JSON error body)."""
    app.add_middleware(
        RequestGuard,
        token=token,
        allowed_hosts=allowed_hosts,
        max_body_bytes=max_body_bytes,
        error=error,
        max_requests=max_requests,
    )

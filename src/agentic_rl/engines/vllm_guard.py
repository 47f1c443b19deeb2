"""The managed vLLM server's key check, run inside the vLLM server process.

vLLM's own ``--api-key`` / ``VLLM_API_KEY`` check (0.32,
``vllm/entrypoints/serve/middleware/authenticate.py``) guards only the ``/v1``, ``/v2``,
``/inference`` and ``/cohere`` prefixes: ``/collective_rpc`` (opened by
``VLLM_SERVER_DEV_MODE``, the weight reload), ``/invocations``, ``/tokenize``, ``/sleep``
and the rest stay open to any local process. ``RequireKey`` is added with vLLM's
``--middleware`` option and asks for ``Authorization: Bearer $VLLM_API_KEY`` on every route
but ``/health`` (the liveness probe).

This file is copied next to the server (engines/vllm_server.py) and imported there by the
vLLM interpreter as a top-level module: it imports only the standard library.
"""

from __future__ import annotations

import hmac
import json
import os

KEY_VARIABLE = "VLLM_API_KEY"
OPEN_PATHS = frozenset({"/health"})
"""What the server answers without the key."""


def authorized(path: str, authorization: str | None, key: str) -> bool:
    """Whether a request to ``path`` with this ``Authorization`` header may pass."""
    if path in OPEN_PATHS:
        return True
    return bool(key) and hmac.compare_digest((authorization or "").encode(), f"Bearer {key}".encode())


class RequireKey:
    """Pure ASGI middleware: 401 (JSON) for a request without the key (see the module docstring)."""

    def __init__(self, app) -> None:
        self.app = app
        self.key = os.environ.get(KEY_VARIABLE, "")
        if not self.key:
            raise RuntimeError(f"{KEY_VARIABLE} is not set: the managed vLLM server needs its key")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            return await self.app(scope, receive, send)
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        header = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"authorization"), None)
        if authorized(path, header, self.key):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps({"error": "Unauthorized: this server needs Authorization: Bearer <key>"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})

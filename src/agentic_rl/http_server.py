"""Serving an ASGI app (FastAPI) safely, shared by the retrieval server and the gateway.

``ASGIServer`` binds with uvicorn to loopback by default; binding beyond loopback needs an
explicit opt-in and a bearer token. ``install_guard`` checks every request before its body
is read: a ``Host`` the server answers to (a loopback server answers only loopback names,
which stops DNS rebinding), the bearer token when one is set, a present, bounded
``Content-Length`` on POST.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def install_guard(
    app, *, token: str | None, allowed_hosts: Sequence[str], max_body_bytes: int, error: Callable[[int, str], Any]
) -> None:
    """Add the request checks (see the module docstring) to ``app``; a failed check answers
    ``error(status, message)`` (each server's own error body)."""
    hosts = {h.lower() for h in allowed_hosts}

    @app.middleware("http")
    async def guard(request, call_next):
        host = (request.headers.get("host") or "").rsplit(":", 1)[0].strip("[]").lower()
        if "*" not in hosts and host not in hosts:
            return error(400, f"Host {host!r} is not served here")
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return error(401, "a bearer token is required (Authorization: Bearer <token>)")
        if request.method == "POST":
            length = request.headers.get("content-length")
            if length is None:
                return error(411, "Content-Length is required")
            if not length.isdigit():
                return error(400, f"Content-Length must be a non-negative integer, got {length!r}")
            if int(length) > max_body_bytes:
                return error(413, f"request body too large ({length} bytes; at most {max_body_bytes})")
        return await call_next(request)


class ASGIServer:
    """Serves the app ``make_app(allowed_hosts)`` with uvicorn. ``port=0`` picks a free port
    (see ``.url``). Loopback by default, answering only loopback Host names; binding beyond
    loopback needs ``allow_remote=True`` and a bearer ``token`` (``what`` names the thing
    served, for the error). ``max_concurrency`` bounds the connections served at once (more
    get HTTP 503)."""

    def __init__(
        self,
        make_app: Callable[[Sequence[str]], Any],
        host: str = "127.0.0.1",
        port: int = 8000,
        *,
        allow_remote: bool = False,
        token: str | None = None,
        verbose: bool = False,
        max_concurrency: int = 64,
        what: str = "the server",
        name: str = "http-server",
    ) -> None:
        import uvicorn

        loopback = is_loopback(host)
        if not loopback and not allow_remote:
            raise ValueError(
                f"host {host!r} is not a loopback address; pass allow_remote=True (and a token) to expose {what}"
            )
        if not loopback and not token:
            raise ValueError(f"host {host!r}: serving beyond loopback requires a bearer token")
        self.name = name
        app = make_app(LOOPBACK_NAMES + (host,) if loopback else ("*",))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.server_address = self.socket.getsockname()
        config = uvicorn.Config(
            app,
            log_level="info" if verbose else "warning",
            access_log=verbose,
            limit_concurrency=max_concurrency,
            timeout_keep_alive=5,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self._server.run(sockets=[self.socket])

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (tests, notebooks) until ``shutdown()``; returns once it accepts requests."""
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name=self.name)
        self._thread.start()
        while not self._server.started and self._thread.is_alive():
            time.sleep(0.01)
        return self._thread

    def shutdown(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def server_close(self) -> None:
        self.socket.close()

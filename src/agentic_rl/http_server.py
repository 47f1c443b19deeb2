"""Serving an ASGI app (FastAPI) safely, shared by the retrieval server and the gateway.

``ASGIServer`` binds with uvicorn to loopback by default; binding beyond loopback needs an
explicit opt-in and a bearer token. Its connections have header and idle deadlines and a
cap idle sockets cannot exhaust (``http_connections``); the app checks every request with
``http_guard.install_guard`` (Host, token, body size counted as read, requests in flight).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentic_rl.http_connections import ConnectionLimits

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ASGIServer:
    """Serves the app ``make_app(allowed_hosts)`` with uvicorn. ``port=0`` picks a free port
    (see ``.url``). Loopback by default, answering only loopback Host names; binding beyond
    loopback needs ``allow_remote=True`` and a bearer ``token`` (``what`` names the thing
    served, for the error). ``limits``: the connections' header and idle deadlines and their
    cap (``http_connections.ConnectionLimits``; how many requests are served at once is the
    app's ``install_guard(max_requests=...)``)."""

    def __init__(
        self,
        make_app: Callable[[Sequence[str]], Any],
        host: str = "127.0.0.1",
        port: int = 8000,
        *,
        allow_remote: bool = False,
        token: str | None = None,
        verbose: bool = False,
        limits: ConnectionLimits | None = None,
        what: str = "the server",
        name: str = "http-server",
    ) -> None:
        import uvicorn

        from agentic_rl.http_connections import ConnectionLimits, protocol_class

        loopback = is_loopback(host)
        if not loopback and not allow_remote:
            raise ValueError(
                f"host {host!r} is not a loopback address; pass allow_remote=True (and a token) to expose {what}"
            )
        if not loopback and not token:
            raise ValueError(f"host {host!r}: serving beyond loopback requires a bearer token")
        self.name = name
        limits = limits if limits is not None else ConnectionLimits()
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
            http=protocol_class(limits),
            ws="none",  # no WebSocket upgrades: every connection stays under the limits above
            timeout_keep_alive=limits.idle_timeout_s,
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

"""Connections a hostile client cannot hold: uvicorn's h11 protocol with a deadline on every
request head and a cap on open connections that idle sockets cannot exhaust.

uvicorn (0.54) times out only a connection that is idle after a response (keep-alive): a
socket that never sends a byte, or sends half a request head, stays open for ever, and its
``limit_concurrency`` counts such sockets, so a few of them turn every other client away.
Here a request head must be complete within ``header_timeout_s`` of the connection opening
(or of its previous response ending), else the connection is closed; an idle keep-alive
connection is closed after ``idle_timeout_s``; at ``max_connections`` a new connection
replaces the one idle longest (only when every connection is serving a request is the new
one closed). How many requests are served at once is bounded separately, per request
(``http_guard``), so idle sockets never count against it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True)
class ConnectionLimits:
    """The connection knobs of ``ASGIServer`` (see the module docstring)."""

    header_timeout_s: float = 10.0
    """A request head must arrive within this of the connection opening or its previous response ending."""
    idle_timeout_s: float = 5.0
    """An idle keep-alive connection is closed after this."""
    max_connections: int = 1024
    """Open connections at most; at the cap a new one replaces the longest-idle one."""


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under ``LIMITS`` (set by ``protocol_class``)."""

    LIMITS = ConnectionLimits()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self.idle_since = self.loop.time()

    @property
    def serving(self) -> bool:
        """Whether a request is being served (its head arrived, its response is not finished)."""
        return self.cycle is not None and not self.cycle.response_complete

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.LIMITS.max_connections:
            idle = [
                c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol) and not c.serving
            ]
            if not idle:
                transport.close()
                return
            min(idle, key=lambda c: c.idle_since).drop()
        self._await_head()

    def _await_head(self) -> None:
        self._cancel_head_deadline()
        self.idle_since = self.loop.time()
        self._head_deadline = self.loop.call_later(self.LIMITS.header_timeout_s, self._head_timed_out)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if not self.serving:
            self.drop()

    def drop(self) -> None:
        """Drop the connection (no request of it is being served)."""
        self._cancel_head_deadline()
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self.serving:  # a request head arrived (the app reads its body under a deadline of its own)
            self._cancel_head_deadline()

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._await_head()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_deadline()
        super().connection_lost(exc)


def protocol_class(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """The protocol class (uvicorn's ``Config(http=...)``) enforcing ``limits``."""
    return type("LimitedH11Protocol", (GuardedH11Protocol,), {"LIMITS": limits})

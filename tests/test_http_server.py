"""The HTTP servers' defences against hostile clients (http_server, http_connections,
http_guard), on real sockets against a real ASGIServer on 127.0.0.1 with short limits:
a body cap that counts the bytes read whatever the headers say, deadlines on request heads
and idle connections, a connection cap that idle sockets cannot exhaust, and a request
limit that counts only requests being served."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentic_rl.http_connections import ConnectionLimits
from agentic_rl.http_guard import RequestGuard, install_guard, loads_bounded
from agentic_rl.http_server import ASGIServer

CAP = 1000
LIMITS = ConnectionLimits(header_timeout_s=0.5, idle_timeout_s=0.5, max_connections=4)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _app(allowed, *, max_requests: int = 2, release: threading.Event | None = None) -> FastAPI:
    app = FastAPI()
    app.state.read = []
    install_guard(app, token=None, allowed_hosts=allowed, max_body_bytes=CAP, error=_error, max_requests=max_requests)

    @app.post("/echo")
    async def echo(request: Request):
        body = await request.body()
        app.state.read.append(len(body))
        return {"bytes": len(body)}

    @app.get("/slow")
    async def slow():
        while release is not None and not release.is_set():
            await asyncio.sleep(0.01)
        return {"ok": True}

    return app


@pytest.fixture
def served():
    release = threading.Event()
    apps = []

    def make(allowed):
        apps.append(_app(allowed, release=release))
        return apps[-1]

    server = ASGIServer(make, "127.0.0.1", 0, limits=LIMITS)
    server.start()
    yield server, apps[0], release
    release.set()
    server.shutdown()
    server.server_close()


def _connect(server) -> socket.socket:
    return socket.create_connection(server.server_address[:2], timeout=5)


def _answer(connection: socket.socket) -> bytes:
    """One whole response (head and its Content-Length of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def _closed_within(connection: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``connection`` (EOF or reset) within ``seconds``, reading what it sends."""
    connection.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not connection.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def test_a_chunked_body_cannot_slip_past_the_cap(served) -> None:
    server, app, _ = served
    chunked = b"%x\r\n%s\r\n" % (20 * CAP, b"x" * 20 * CAP) + b"0\r\n\r\n"
    head = b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    with _connect(server) as connection:  # a small Content-Length beside a chunked body
        connection.sendall(head + b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
        answer = _answer(connection)
    assert answer.startswith(b"HTTP/1.1 400") and b"both Content-Length and Transfer-Encoding" in answer
    with _connect(server) as connection:
        connection.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
        assert _answer(connection).startswith(b"HTTP/1.1 411")
    assert app.state.read == []  # no body was read
    assert httpx.post(f"{server.url}/echo", content=b"x" * CAP).json() == {"bytes": CAP}
    assert httpx.post(f"{server.url}/echo", content=b"x" * (CAP + 1)).status_code == 413


def test_the_cap_counts_the_bytes_read_whatever_the_headers_say() -> None:
    """A receive that delivers more than the headers announced (a lying framing layer) is cut at the cap."""
    read = []

    async def app(scope, receive, send) -> None:
        while True:
            message = await receive()
            read.append(len(message["body"]))
            if not message.get("more_body"):
                break
        await JSONResponse({"read": sum(read)})(scope, receive, send)

    guard = RequestGuard(app, token=None, allowed_hosts=["*"], max_body_bytes=CAP, error=_error, max_requests=4)
    chunks = iter([b"x" * 600, b"x" * 600, b"x" * 600])

    async def receive():
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    sent = []

    async def send(message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", b"x"), (b"content-length", b"10")]}
    asyncio.run(guard(scope, receive, send))
    assert sent[0]["status"] == 413 and b"whatever the headers said" in sent[1]["body"]
    assert sum(read) == 600  # the second chunk, past the cap, never reached the app


def test_a_request_head_must_arrive_in_time(served) -> None:
    server, _, _ = served
    silent, partial = _connect(server), _connect(server)
    partial.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
    started = time.monotonic()
    assert _closed_within(silent, 5) and _closed_within(partial, 5)
    assert time.monotonic() - started < 3
    silent.close(), partial.close()


def test_an_idle_keep_alive_connection_is_closed(served) -> None:
    server, _, release = served
    release.set()
    with _connect(server) as connection:
        connection.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert connection.recv(65536).startswith(b"HTTP/1.1 200")
        assert _closed_within(connection, 5)


def test_idle_and_half_open_sockets_do_not_turn_clients_away(served) -> None:
    """More idle sockets than the connection cap and the request limit: a new client is still served."""
    server, _, release = served
    release.set()
    idle = [_connect(server) for _ in range(3 * LIMITS.max_connections)]
    for connection in idle[::2]:
        connection.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.")  # half a request head
    try:
        for _ in range(3):
            response = httpx.get(f"{server.url}/slow", timeout=5)
            assert response.status_code == 200
    finally:
        for connection in idle:
            connection.close()


def test_requests_beyond_the_limit_get_503_and_idle_ones_do_not_count(served) -> None:
    server, _, release = served
    with httpx.Client(timeout=10) as client:
        busy = [threading.Thread(target=client.get, args=(f"{server.url}/slow",)) for _ in range(2)]
        for thread in busy:
            thread.start()
        time.sleep(0.3)
        refused = httpx.get(f"{server.url}/slow", timeout=5)
        assert refused.status_code == 503 and "busy" in refused.json()["error"]
        release.set()
        for thread in busy:
            thread.join()
    assert httpx.get(f"{server.url}/slow", timeout=5).status_code == 200


def test_json_bodies_are_bounded() -> None:
    assert loads_bounded(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    for raw, message in [
        (b"[" * 100_000 + b"]" * 100_000, "nested at most 64 deep"),
        (b"[" * 65 + b"]" * 65, "nested at most 64 deep"),
        (b"[1e400]", "out of range"),
        (b"[NaN]", "NaN is not a JSON number"),
        (b"[-Infinity]", "-Infinity is not a JSON number"),
        (b"1" * 5000, "the body must be JSON"),
        (b"\xff", "the body must be JSON"),
        (b"{x", "the body must be JSON"),
    ]:
        with pytest.raises(ValueError, match=message):
            loads_bounded(raw)

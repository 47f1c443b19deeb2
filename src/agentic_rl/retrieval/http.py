"""A retrieval server over HTTP and its client, speaking the Search-R1 protocol.

``POST /retrieve`` with ``{"queries": [str, ...], "topk": int, "return_scores": bool}``
answers ``{"result": [[{"document": {"id", "title", "text", "contents"}, "score": float},
...], ...]}`` (``contents`` is Search-R1's ``"Title"\\ntext`` form, so Search-R1
clients work unchanged); ``GET /health`` answers ``{"status": "ok", "num_docs": N}``.
The server runs on FastAPI + uvicorn with bounded requests (size, read time, concurrency),
binds to loopback unless told otherwise (then a bearer token is required) and answers
only the Host names it is bound to.
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentic_rl.retrieval.base import Document, Retriever

__all__ = ["HTTPRetriever", "RetrievalServer", "serve"]

TOKEN_VARIABLE = "AGENTIC_RL_RETRIEVER_TOKEN"
"""The environment variable a client (and ``agentic-rl retriever serve``) reads the bearer token from."""


def _parse_document(item: dict[str, Any]) -> Document:
    body = item.get("document", item)
    title, text = body.get("title"), body.get("text")
    if title is None or text is None:  # a plain Search-R1 server: "Title"\ntext
        contents = str(body.get("contents", ""))
        first, _, rest = contents.partition("\n")
        title, text = first.strip().strip('"'), rest
    return Document(id=str(body.get("id", "")), title=str(title), text=str(text), score=float(item.get("score", 0.0)))


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


class RetrievalServer:
    """Serves one retriever with uvicorn. ``port=0`` picks a free port (see ``.url``).

    Loopback by default, answering only loopback Host names; binding beyond loopback
    needs ``allow_remote=True`` and a bearer ``token`` (every request must carry it).
    ``max_concurrency`` bounds the connections served at once (more get HTTP 503)."""

    def __init__(
        self, retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, *, allow_remote: bool = False, token: str | None = None,
        verbose: bool = False, max_concurrency: int = 64, read_timeout_s: float = 30.0,
    ) -> None:
        import socket

        import uvicorn

        loopback = _is_loopback(host)
        if not loopback and not allow_remote:
            raise ValueError(f"host {host!r} is not a loopback address; pass allow_remote=True (and a token) to expose the index")
        if not loopback and not token:
            raise ValueError(f"host {host!r}: serving beyond loopback requires a bearer token")
        self.retriever = retriever
        allowed = LOOPBACK_NAMES + (host,) if loopback else ("*",)
        from agentic_rl.retrieval.app import create_app

        app = create_app(retriever, token=token, allowed_hosts=allowed, read_timeout_s=read_timeout_s)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.server_address = self.socket.getsockname()
        config = uvicorn.Config(app, log_level="info" if verbose else "warning", access_log=verbose, limit_concurrency=max_concurrency, timeout_keep_alive=5)
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
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name="retrieval-server")
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


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, *, allow_remote: bool = False, token: str | None = None, verbose: bool = True) -> None:
    """Serve until interrupted."""
    server = RetrievalServer(retriever, host, port, allow_remote=allow_remote, token=token, verbose=verbose)
    try:
        server.serve_forever()
    finally:
        server.server_close()


class HTTPRetriever:
    """Client of a retrieval server (this one or a Search-R1 ``retrieval_server.py``)."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, retries: int = 2, token: str | None = None) -> None:
        import httpx

        self.url = url.rstrip("/")
        if not self.url.endswith("/retrieve"):
            self.url += "/retrieve"
        self.retries = retries
        token = token if token is not None else os.environ.get(TOKEN_VARIABLE)
        self._client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {token}"} if token else {})

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Document]]:
        import httpx

        payload = {"queries": list(queries), "topk": k, "return_scores": True}
        for attempt in range(self.retries + 1):
            try:
                response = self._client.post(self.url, json=payload)
                break
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
        if response.status_code != 200:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise RuntimeError(f"retrieval server answered {response.status_code}: {message}")
        return [[_parse_document(item) for item in result] for result in response.json()["result"]]

    def search(self, query: str, k: int = 3) -> list[Document]:
        return self.search_batch([query], k)[0]

    def close(self) -> None:
        self._client.close()

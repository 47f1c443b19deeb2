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

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentic_rl.http_server import ASGIServer
from agentic_rl.retrieval.base import Document, Retriever

if TYPE_CHECKING:
    from agentic_rl.http_connections import ConnectionLimits

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


class RetrievalServer(ASGIServer):
    """Serves one retriever with uvicorn (http_server.ASGIServer: loopback by default,
    ``allow_remote=True`` and a bearer ``token`` beyond it). ``port=0`` picks a free port;
    ``max_concurrency``: requests served at once (more get 503); ``limits``: the
    connections' deadlines and cap (``http_connections.ConnectionLimits``)."""

    def __init__(
        self,
        retriever: Retriever,
        host: str = "127.0.0.1",
        port: int = 8000,
        *,
        allow_remote: bool = False,
        token: str | None = None,
        verbose: bool = False,
        max_concurrency: int = 64,
        read_timeout_s: float = 30.0,
        limits: ConnectionLimits | None = None,
    ) -> None:
        from agentic_rl.retrieval.app import create_app

        self.retriever = retriever
        super().__init__(
            lambda allowed: create_app(
                retriever,
                token=token,
                allowed_hosts=allowed,
                read_timeout_s=read_timeout_s,
                max_concurrency=max_concurrency,
            ),
            host,
            port,
            allow_remote=allow_remote,
            token=token,
            verbose=verbose,
            limits=limits,
            what="the index",
            name="retrieval-server",
        )


def serve(
    retriever: Retriever,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    allow_remote: bool = False,
    token: str | None = None,
    verbose: bool = True,
) -> None:
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

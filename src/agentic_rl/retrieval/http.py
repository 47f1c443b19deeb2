"""A retrieval server over HTTP and its client, speaking the Search-R1 protocol.

``POST /retrieve`` with ``{"queries": [str, ...], "topk": int, "return_scores": bool}``
answers ``{"result": [[{"document": {"id", "title", "text", "contents"}, "score": float},
...], ...]}`` (``contents`` is Search-R1's ``"Title"\\ntext`` form, so Search-R1
clients work unchanged); ``GET /health`` answers ``{"status": "ok", "num_docs": N}``.
The server uses the standard library (``http.server``, one thread per request) and
binds to loopback unless told otherwise.
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentic_rl.retrieval.base import Document, Retriever

__all__ = ["HTTPRetriever", "RetrievalServer", "serve"]

MAX_QUERIES = 1024
MAX_TOPK = 100
MAX_BODY_BYTES = 1 << 20


def _document_payload(doc: Document) -> dict[str, Any]:
    return {"document": {"id": doc.id, "title": doc.title, "text": doc.text, "contents": f'"{doc.title}"\n{doc.text}'}, "score": doc.score}


def _parse_document(item: dict[str, Any]) -> Document:
    body = item.get("document", item)
    title, text = body.get("title"), body.get("text")
    if title is None or text is None:  # a plain Search-R1 server: "Title"\ntext
        contents = str(body.get("contents", ""))
        first, _, rest = contents.partition("\n")
        title, text = first.strip().strip('"'), rest
    return Document(id=str(body.get("id", "")), title=str(title), text=str(text), score=float(item.get("score", 0.0)))


class _Handler(BaseHTTPRequestHandler):
    server: "RetrievalServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet by default
        if self.server.verbose:
            super().log_message(format, *args)

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/health":
            self._reply(200, {"status": "ok", "num_docs": getattr(self.server.retriever, "num_docs", None)})
        else:
            self._reply(404, {"error": f"unknown path {self.path}; use POST /retrieve or GET /health"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") != "/retrieve":
            self._reply(404, {"error": f"unknown path {self.path}; use POST /retrieve"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            if length > MAX_BODY_BYTES:
                raise ValueError(f"request body too large ({length} bytes)")
            request = json.loads(self.rfile.read(length) or b"{}")
            queries = request.get("queries")
            if isinstance(request.get("query"), str):
                queries = [request["query"]]
            topk = int(request.get("topk", request.get("k", 3)))
            if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
                raise ValueError('"queries" must be a list of strings')
            if len(queries) > MAX_QUERIES or not 1 <= topk <= MAX_TOPK:
                raise ValueError(f"at most {MAX_QUERIES} queries and 1 <= topk <= {MAX_TOPK}")
        except (ValueError, TypeError, AttributeError) as exc:
            self._reply(400, {"error": str(exc)})
            return
        try:
            results = [[_document_payload(doc) for doc in self.server.retriever.search(query, topk)] for query in queries]
        except Exception as exc:
            self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._reply(200, {"result": results})


class RetrievalServer(ThreadingHTTPServer):
    """Serves one retriever. ``port=0`` picks a free port (see ``.url``)."""

    daemon_threads = True

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, *, allow_remote: bool = False, verbose: bool = False) -> None:
        if not allow_remote and not _is_loopback(host):
            raise ValueError(f"host {host!r} is not a loopback address; pass allow_remote=True to expose the index")
        self.retriever = retriever
        self.verbose = verbose
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (tests, notebooks); stop with ``shutdown()`` + ``server_close()``."""
        thread = threading.Thread(target=self.serve_forever, daemon=True, name="retrieval-server")
        thread.start()
        return thread


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, *, allow_remote: bool = False, verbose: bool = True) -> None:
    """Serve until interrupted."""
    server = RetrievalServer(retriever, host, port, allow_remote=allow_remote, verbose=verbose)
    try:
        server.serve_forever()
    finally:
        server.server_close()


class HTTPRetriever:
    """Client of a retrieval server (this one or a Search-R1 ``retrieval_server.py``)."""

    def __init__(self, url: str, *, timeout_s: float = 30.0, retries: int = 2) -> None:
        import httpx

        self.url = url.rstrip("/")
        if not self.url.endswith("/retrieve"):
            self.url += "/retrieve"
        self.retries = retries
        self._client = httpx.Client(timeout=timeout_s)

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

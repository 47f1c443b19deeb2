"""The retrieval server's ASGI app (FastAPI), speaking the Search-R1 protocol: ``POST
/retrieve`` with ``{"queries": [...], "topk": k}`` -> ``{"result": [[{"document": {...},
"score": s}, ...], ...]}``; ``GET /health``. ``retrieval/http.py`` runs it with uvicorn.

(No ``from __future__ import annotations`` here: FastAPI reads the route signatures' types.)
"""

import asyncio
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentic_rl.http_guard import install_guard, loads_bounded
from agentic_rl.retrieval.base import Document, Retriever

MAX_QUERIES = 1024
MAX_TOPK = 100
MAX_BODY_BYTES = 1 << 20


def _document_payload(doc: Document) -> dict[str, Any]:
    return {
        "document": {"id": doc.id, "title": doc.title, "text": doc.text, "contents": f'"{doc.title}"\n{doc.text}'},
        "score": doc.score,
    }


def create_app(
    retriever: Retriever,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = ("*",),
    max_body_bytes: int = MAX_BODY_BYTES,
    read_timeout_s: float = 30.0,
    max_concurrency: int,
):
    """The ASGI app (FastAPI) serving ``retriever``: ``POST /retrieve``, ``GET /health``.

    Every request is checked (``http_guard``): a ``Host`` in ``allowed_hosts`` (a loopback
    server answers only loopback names, which stops DNS rebinding), the bearer ``token``
    when one is set, a ``Content-Length`` that is present, non-negative and at most
    ``max_body_bytes`` (and the bytes read counted against it), at most
    ``max_concurrency`` requests at once; the body must arrive within ``read_timeout_s``.
    Errors are JSON ``{"error": "..."}`` with 4xx statuses; a retriever failure is a 500."""
    app = FastAPI(title="agentic-rl retrieval", docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    install_guard(
        app,
        token=token,
        allowed_hosts=allowed_hosts,
        max_body_bytes=max_body_bytes,
        error=error,
        max_requests=max_concurrency,
    )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        hint = "; use POST /retrieve or GET /health" if exc.status_code in (404, 405) else ""
        return error(exc.status_code, f"{exc.detail} ({request.method} {request.url.path}){hint}")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "num_docs": getattr(retriever, "num_docs", None)}

    @app.post("/retrieve")
    async def retrieve(request: Request):
        try:
            raw = await asyncio.wait_for(request.body(), timeout=read_timeout_s)
        except asyncio.TimeoutError:
            return error(408, f"the request body did not arrive within {read_timeout_s:g} s")
        try:
            queries, topk = _parse_request(loads_bounded(raw or b"{}"))
        except ValueError as exc:
            return error(400, str(exc))
        try:
            results = await run_in_threadpool(
                lambda: [[_document_payload(doc) for doc in retriever.search(query, topk)] for query in queries]
            )
        except Exception as exc:  # the retriever's failure, not the client's
            return error(500, f"{type(exc).__name__}: {exc}")
        return {"result": results}

    return app


def _parse_request(request: Any) -> tuple[list[str], int]:
    """(queries, topk) of a ``/retrieve`` body; ValueError with one line when it is malformed."""
    if not isinstance(request, dict):
        raise ValueError("the body must be a JSON object")
    queries = request.get("queries")
    if isinstance(request.get("query"), str):
        queries = [request["query"]]
    topk = request.get("topk", request.get("k", 3))
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError('"queries" must be a list of strings')
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise ValueError(f'"topk" must be an integer, got {str(topk)[:40]}')
    if len(queries) > MAX_QUERIES or not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"at most {MAX_QUERIES} queries and 1 <= topk <= {MAX_TOPK}")
    return queries, topk

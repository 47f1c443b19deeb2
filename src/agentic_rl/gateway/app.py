"""The gateway's ASGI app (FastAPI): OpenAI-compatible chat and text completions over the
policy, with per-episode trace capture.

Routes: ``GET /health``; ``GET /v1/models``; ``POST /v1/chat/completions``;
``POST /v1/completions`` (legacy text completions: a prompt string or token ids, no chat
template); the same under ``/episodes/{episode_id}/v1/...`` (an unmodified OpenAI client
joins an episode by its ``base_url``; the ``X-Episode-Id`` header does the same on the
plain routes); ``POST /episodes/{episode_id}/reward`` with ``{"reward": r, "info": {...}}``
(``r``: a number, every role's, or ``{role: number}`` for a multi-role episode);
``GET /episodes/{episode_id}`` (the recorded calls, token ids included). Errors are
OpenAI-style JSON (``{"error": {"message", "type", "param", "code"}}``) with 4xx statuses
for bad requests; an engine failure is a 500.

Reward writes need ``Authorization: Bearer <write_token>``: the server's bearer token when
one is set, else a random secret the process that started the server holds
(``GatewayServer.write_token``), so no other local process can set an episode's reward.
Episode calls are recorded under the episode id alone (an unmodified OpenAI client joins
by its ``base_url``; a trainer's episode ids are random).

Streams send each choice's text as it is sampled (choices interleaved, each with its own
index), holding back only text a stop string or a tool call may still take back; a tool
call arrives as ``delta.tool_calls`` once the choice is finished, and what a stream sends
adds up to the response the same request gets unstreamed.

(No ``from __future__ import annotations`` here: FastAPI reads the route signatures' types.)
"""

import hmac
import math
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentic_rl.chat import ChatRenderer
from agentic_rl.gateway.chat import RequestError
from agentic_rl.gateway.chat_completions import chat_completion
from agentic_rl.gateway.fields import MAX_BODY_BYTES, error_response, read_json
from agentic_rl.gateway.service import CompletionService
from agentic_rl.gateway.state import GatewayState
from agentic_rl.gateway.text_completions import text_completion
from agentic_rl.gateway.traces import EpisodeStore
from agentic_rl.http_guard import install_guard
from agentic_rl.parsers.base import ToolCallParser


def create_app(
    service: CompletionService,
    renderer: ChatRenderer,
    parser: ToolCallParser,
    *,
    model_name: str,
    store: EpisodeStore | None = None,
    max_context: int = 8192,
    default_max_tokens: int = 512,
    token: str | None = None,
    write_token: str,
    allowed_hosts: Sequence[str] = ("*",),
    max_concurrency: int,
):
    """The ASGI app serving ``service`` (see the module docstring). ``renderer``: the model's
    chat template; ``parser``: its tool-call format; ``max_context``: most prompt +
    completion tokens per call; ``default_max_tokens``: a chat completion's limit when the
    request names none; ``token``: the bearer token every request needs (None: none);
    ``write_token``: the one reward writes need; ``max_concurrency``: requests served at once."""
    app = FastAPI(title="agentic-rl gateway", docs_url=None, redoc_url=None, openapi_url=None)
    store = store if store is not None else EpisodeStore()
    state = GatewayState(service, renderer, parser, model_name, store, max_context, default_max_tokens)
    app.state.store = store
    install_guard(
        app,
        token=token,
        allowed_hosts=allowed_hosts,
        max_body_bytes=MAX_BODY_BYTES,
        error=error_response,
        max_requests=max_concurrency,
    )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, f"{exc.detail} ({request.method} {request.url.path})")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "weight_version": service.weight_version}

    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "agentic-rl"}],
        }

    app.get("/v1/models")(models)
    app.get("/episodes/{episode_id}/v1/models")(lambda episode_id: models())

    async def respond(request: Request, episode_id: str | None, handler):
        try:
            body = await read_json(request)
            return await handler(state, body, episode_id or request.headers.get("x-episode-id"))
        except RequestError as error:
            return error_response(error.status, str(error), error.param)

    @app.post("/v1/chat/completions")
    async def chat_plain(request: Request):
        return await respond(request, None, chat_completion)

    @app.post("/episodes/{episode_id}/v1/chat/completions")
    async def chat_episode(episode_id: str, request: Request):
        return await respond(request, episode_id, chat_completion)

    @app.post("/v1/completions")
    async def text_plain(request: Request):
        return await respond(request, None, text_completion)

    @app.post("/episodes/{episode_id}/v1/completions")
    async def text_episode(episode_id: str, request: Request):
        return await respond(request, episode_id, text_completion)

    _episode_routes(app, store, write_token)
    return app


def _finite_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return number if math.isfinite(number) else None


def _reward_value(given: Any) -> float | dict[str, float]:
    """A posted reward: a finite number (every role's), or ``{role: finite number}`` (each role its own)."""
    if isinstance(given, dict) and given:
        values = {role: _finite_number(value) for role, value in given.items()}
        bad = next((role for role, value in values.items() if value is None), None)
        if bad is not None:
            raise RequestError(
                f"reward: role {bad[:40]!r}: expected a finite number, got {str(given[bad])[:40]}", "reward"
            )
        return values
    value = _finite_number(given)
    if value is None:
        raise RequestError(f"reward: expected a finite number or {{role: number}}, got {str(given)[:40]}", "reward")
    return value


def _episode_routes(app: FastAPI, store: EpisodeStore, write_token: str) -> None:
    """An episode's reward (posted by the agent program, with the write token) and its recorded calls."""

    @app.post("/episodes/{episode_id}/reward")
    async def reward(episode_id: str, request: Request):
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {write_token}".encode()):
            return error_response(
                403, "reward writes need the server's write token (Authorization: Bearer <write_token>)"
            )
        try:
            body = await read_json(request)
            value = _reward_value(body.get("reward"))
            info = body.get("info") or {}
            if not isinstance(info, dict):
                raise RequestError("info: expected an object", "info")
            store.set_reward(episode_id, value, info)
        except RequestError as error:
            return error_response(error.status, str(error), error.param)
        return {"episode_id": episode_id, "reward": value}

    @app.get("/episodes/{episode_id}")
    async def episode(episode_id: str):
        trace = store.get(episode_id)
        if trace is None:
            return error_response(404, f"no episode {episode_id!r}", "episode_id")
        return {
            "episode_id": episode_id,
            "reward": trace.reward,
            "info": trace.info,
            "calls": [call.to_dict() for call in trace.calls],
        }

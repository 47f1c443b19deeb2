"""The gateway's ASGI app (FastAPI): OpenAI-compatible chat completions over the policy, with
per-episode trace capture.

Routes: ``GET /health``; ``GET /v1/models``; ``POST /v1/chat/completions``; the same under
``/episodes/{episode_id}/v1/...`` (an unmodified OpenAI client joins an episode by its
``base_url``; the ``X-Episode-Id`` header does the same on the plain routes);
``POST /episodes/{episode_id}/reward`` with ``{"reward": r, "info": {...}}``;
``GET /episodes/{episode_id}`` (the recorded calls, token ids included). Errors are
OpenAI-style JSON (``{"error": {"message", "type", "param", "code"}}``) with 4xx statuses
for bad requests; an engine failure is a 500.

(No ``from __future__ import annotations`` here: FastAPI reads the route signatures' types.)
"""

import asyncio
import json
import random
import time
import uuid
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentic_rl.gateway.chat import RequestError, reply_message, to_model_messages, tool_schemas
from agentic_rl.gateway.service import CompletionService
from agentic_rl.gateway.traces import Call, EpisodeStore
from agentic_rl.http_server import install_guard
from agentic_rl.parsers.base import ToolCallParser
from agentic_rl.rollout.chat import ChatRenderer
from agentic_rl.seeds import stream_seed

MAX_BODY_BYTES = 4 << 20
MAX_CHOICES = 16
MAX_STOP_STRINGS = 4


def error_response(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"{name}: expected a number in [{low:g}, {high:g}], got {value!r}", name)
    return float(value)


def _integer(body: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"{name}: expected an integer in [{low}, {high}], got {value!r}", name)
    return value


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOP_STRINGS:
        raise RequestError(f"stop: expected a string or a list of at most {MAX_STOP_STRINGS} non-empty strings", "stop")
    return stops


def _cut_at_stop(renderer: ChatRenderer, ids: list[int], stops: list[str]) -> tuple[list[int], str, bool]:
    """(ids, text) up to the first stop string (the text without it, the ids up to the token
    that completed it), and whether a stop string was found."""
    text = renderer.response_text(ids)
    hits = [(text.find(s), s) for s in stops if s in text]
    if not hits:
        return ids, text, False
    index, stop = min(hits)
    for k in range(1, len(ids) + 1):  # the shortest prefix whose text reaches the stop string
        if len(renderer.response_text(ids[:k])) >= index + len(stop) and stop in renderer.response_text(ids[:k]):
            return ids[:k], text[:index], True
    return ids, text[:index], True


def create_app(
    service: CompletionService, renderer: ChatRenderer, parser: ToolCallParser, *, model_name: str, store: EpisodeStore | None = None,
    max_context: int = 8192, default_max_tokens: int = 512, token: str | None = None, allowed_hosts: Sequence[str] = ("*",),
):
    """The ASGI app serving ``service`` (see the module docstring). ``renderer``: the model's
    chat template; ``parser``: its tool-call format; ``max_context``: most prompt +
    completion tokens per call."""
    app = FastAPI(title="agentic-rl gateway", docs_url=None, redoc_url=None, openapi_url=None)
    store = store if store is not None else EpisodeStore()
    app.state.store = store
    install_guard(app, token=token, allowed_hosts=allowed_hosts, max_body_bytes=MAX_BODY_BYTES, error=error_response)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, f"{exc.detail} ({request.method} {request.url.path})")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "weight_version": service.weight_version}

    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "agentic-rl"}]}

    app.get("/v1/models")(models)
    app.get("/episodes/{episode_id}/v1/models")(lambda episode_id: models())

    async def read_json(request: Request) -> dict:
        try:
            body = json.loads(await asyncio.wait_for(request.body(), timeout=30.0) or b"{}")
        except asyncio.TimeoutError:
            raise RequestError("the request body did not arrive within 30 s") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError("the body must be JSON") from None
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        return body

    async def chat(request: Request, episode_id: str | None):
        try:
            body = await read_json(request)
            return await _chat(body, episode_id or request.headers.get("x-episode-id"))
        except RequestError as error:
            return error_response(400, str(error), error.param)

    async def _chat(body: dict, episode_id: str | None):
        messages = body.get("messages")
        schemas = tool_schemas(body.get("tools"))
        tool_choice = body.get("tool_choice", "auto")
        if tool_choice not in ("auto", "none", "required", None) and not isinstance(tool_choice, dict):
            raise RequestError("tool_choice: expected auto, none, required or {type: function, function: {name}}", "tool_choice")
        model_messages = to_model_messages(messages, schemas, parser)
        n = _integer(body, "n", 1, 1, MAX_CHOICES)
        temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
        top_p = _number(body, "top_p", 1.0, 1e-6, 1.0)
        limit = _integer(body, "max_completion_tokens", None, 1, max_context) or _integer(body, "max_tokens", default_max_tokens, 1, max_context)
        seed = _integer(body, "seed", None, -(2**63), 2**63 - 1)
        stops = _stops(body)
        if _integer(body, "top_logprobs", 0, 0, 20):
            raise RequestError("top_logprobs: alternatives are not returned; only the sampled tokens' log-probs (logprobs: true)", "top_logprobs")
        want_logprobs = bool(body.get("logprobs"))
        stream = bool(body.get("stream"))
        tools_key = json.dumps(schemas, sort_keys=True)
        continued = store.continuation(episode_id, messages, tools_key) if episode_id else None
        if continued is not None:  # the history is a call we served: append only the new messages' tokens
            call, start = continued
            tail = model_messages[len(model_messages) - (len(messages) - start) :]
            prompt = call.prompt_ids + call.completion_ids + renderer.observation_ids(tail, stopped=call.finish_reason != "length")
        else:
            prompt = renderer.prompt_ids(model_messages)
        room = max_context - len(prompt)
        if room < 1:
            raise RequestError(f"messages: the prompt is {len(prompt)} tokens; this server allows {max_context} in all", "messages")
        if seed is None and episode_id:
            seed = store.request_seed(episode_id)
        base = seed if seed is not None else random.getrandbits(62)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        parse_tools = bool(schemas) and tool_choice != "none"
        if stream and n == 1 and not parse_tools and not stops:  # token by token (tool calls and stop strings need the whole text)
            record = (lambda call: store.record(episode_id, Call(**call, messages=list(messages), tools=tools_key))) if episode_id else None
            options = {"max_tokens": min(limit, room), "seed": stream_seed(base, 0), "temperature": temperature, "top_p": top_p}
            return StreamingResponse(_live_stream(service, renderer, prompt, options, model_name, record, include_usage), media_type="text/event-stream")
        futures = [service.submit(prompt, max_tokens=min(limit, room), seed=stream_seed(base, i), temperature=temperature, top_p=top_p) for i in range(n)]
        try:
            completions = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        except asyncio.CancelledError:  # the client went away: its requests need no answer
            for future in futures:
                future.cancel()
            raise
        choices, usage = [], 0
        for index, completion in enumerate(completions):
            if completion.error is not None:
                return error_response(500, f"the engine failed: {completion.error}")
            ids, text, stopped_by_string = _cut_at_stop(renderer, completion.token_ids, stops)
            logprobs = completion.logprobs[: len(ids)]
            message, calls = reply_message(text, parser if parse_tools else None)
            finish = "tool_calls" if calls else ("length" if completion.finish_reason == "length" and not stopped_by_string else "stop")
            if episode_id:
                store.record(episode_id, Call(prompt, ids, logprobs, completion.weight_version, "stop" if finish != "length" else "length",
                                              messages=list(messages), reply=message, tools=tools_key))
            usage += len(ids)
            choice = {"index": index, "message": message, "finish_reason": finish, "logprobs": None}
            if want_logprobs:
                choice["logprobs"] = {"content": [_token_logprob(renderer, token, logprob) for token, logprob in zip(ids, logprobs)]}
            choices.append(choice)
        response = {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": model_name,
            "choices": choices, "usage": {"prompt_tokens": len(prompt), "completion_tokens": usage, "total_tokens": len(prompt) + usage},
            "system_fingerprint": f"weights-v{completions[0].weight_version}",
        }
        if stream:
            return StreamingResponse(_sse(response, include_usage=include_usage), media_type="text/event-stream")
        return response

    @app.post("/v1/chat/completions")
    async def chat_plain(request: Request):
        return await chat(request, None)

    @app.post("/episodes/{episode_id}/v1/chat/completions")
    async def chat_episode(episode_id: str, request: Request):
        return await chat(request, episode_id)

    @app.post("/episodes/{episode_id}/reward")
    async def reward(episode_id: str, request: Request):
        try:
            body = await read_json(request)
            value = body.get("reward")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise RequestError(f"reward: expected a number, got {value!r}", "reward")
            info = body.get("info") or {}
            if not isinstance(info, dict):
                raise RequestError("info: expected an object", "info")
        except RequestError as error:
            return error_response(400, str(error), error.param)
        store.set_reward(episode_id, float(value), info)
        return {"episode_id": episode_id, "reward": float(value)}

    @app.get("/episodes/{episode_id}")
    async def episode(episode_id: str):
        trace = store.get(episode_id)
        if trace is None:
            return error_response(404, f"no episode {episode_id!r}", "episode_id")
        return {"episode_id": episode_id, "reward": trace.reward, "info": trace.info, "calls": [call.to_dict() for call in trace.calls]}

    return app


def _token_logprob(renderer: ChatRenderer, token: int, logprob: float) -> dict[str, Any]:
    text = renderer.tokenizer.decode([token])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8")), "top_logprobs": []}


def _chunk(response_id: str, created: int, model: str, index: int, delta: dict, finish: str | None = None, **extra) -> str:
    body = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra}
    return f"data: {json.dumps(body)}\n\n"


async def _live_stream(service: CompletionService, renderer: ChatRenderer, prompt: list[int], options: dict, model: str, record, include_usage: bool):
    """One completion streamed as it is sampled (server-sent events). A client that goes
    away cancels the request: the engine frees its slot at the next decode step."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    future = service.submit(prompt, on_tokens=lambda ids: loop.call_soon_threadsafe(queue.put_nowait, ids), **options)
    future.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, None))  # after the last tokens
    response_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    try:
        yield _chunk(response_id, created, model, 0, {"role": "assistant", "content": ""})
        ids: list[int] = []
        sent = ""
        while (item := await queue.get()) is not None:
            ids += item
            text = renderer.response_text(ids)
            if len(text) > len(sent) and not text.endswith("\ufffd"):  # not in the middle of a multi-byte character
                yield _chunk(response_id, created, model, 0, {"content": text[len(sent) :]})
                sent = text
        completion = future.result()
        if completion.error is not None:
            yield f"data: {json.dumps({'error': {'message': f'the engine failed: {completion.error}', 'type': 'server_error', 'param': None, 'code': None}})}\n\n"
            return
        text = renderer.response_text(completion.token_ids)
        if len(text) > len(sent):
            yield _chunk(response_id, created, model, 0, {"content": text[len(sent) :]})
        finish = "length" if completion.finish_reason == "length" else "stop"
        if record is not None:
            record({"prompt_ids": prompt, "completion_ids": completion.token_ids, "logprobs": completion.logprobs, "weight_version": completion.weight_version,
                    "finish_reason": finish, "reply": {"role": "assistant", "content": text}})
        yield _chunk(response_id, created, model, 0, {}, finish)
        if include_usage:
            usage = {"prompt_tokens": len(prompt), "completion_tokens": len(completion.token_ids), "total_tokens": len(prompt) + len(completion.token_ids)}
            yield f"data: {json.dumps({'id': response_id, 'object': 'chat.completion.chunk', 'created': created, 'model': model, 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        future.cancel()  # no-op once done; otherwise the client left mid-stream


async def _sse(response: dict[str, Any], *, include_usage: bool):
    """A completed response as OpenAI's stream of chunks (role, content, tool calls,
    finish), then ``[DONE]``: for several choices, tool calls and stop strings, which need
    the whole text."""

    def chunk(index: int, delta: dict, finish: str | None = None) -> str:
        return _chunk(response["id"], response["created"], response["model"], index, delta, finish)

    for choice in response["choices"]:
        message, index = choice["message"], choice["index"]
        yield chunk(index, {"role": "assistant", "content": ""})
        if message.get("content"):
            yield chunk(index, {"content": message["content"]})
        for position, call in enumerate(message.get("tool_calls") or []):
            yield chunk(index, {"tool_calls": [{"index": position, **call}]})
        yield chunk(index, {}, choice["finish_reason"])
    if include_usage:
        body = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"], "model": response["model"], "choices": [], "usage": response["usage"]}
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"

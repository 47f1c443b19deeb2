"""The gateway's ASGI app (FastAPI): OpenAI-compatible chat and text completions over the
policy, with per-episode trace capture.

Routes: ``GET /health``; ``GET /v1/models``; ``POST /v1/chat/completions``;
``POST /v1/completions`` (legacy text completions: a prompt string or token ids, no chat
template); the same under ``/episodes/{episode_id}/v1/...`` (an unmodified OpenAI client
joins an episode by its ``base_url``; the ``X-Episode-Id`` header does the same on the
plain routes); ``POST /episodes/{episode_id}/reward`` with ``{"reward": r, "info": {...}}``;
``GET /episodes/{episode_id}`` (the recorded calls, token ids included). Errors are
OpenAI-style JSON (``{"error": {"message", "type", "param", "code"}}``) with 4xx statuses
for bad requests; an engine failure is a 500.

Streams send each choice's text as it is sampled (choices interleaved, each with its own
index), holding back only text a stop string or a tool call may still take back; a tool
call arrives as ``delta.tool_calls`` once the choice is finished, and what a stream sends
adds up to the response the same request gets unstreamed.

(No ``from __future__ import annotations`` here: FastAPI reads the route signatures' types.)
"""

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentic_rl.chat import ChatRenderer
from agentic_rl.engines.base import Completion
from agentic_rl.gateway.chat import RequestError, reply_message, to_model_messages, tool_schemas
from agentic_rl.gateway.service import CompletionService
from agentic_rl.gateway.streaming import LiveText, sampled
from agentic_rl.gateway.traces import Call, EpisodeStore
from agentic_rl.http_server import install_guard
from agentic_rl.parsers.base import ToolCallParser
from agentic_rl.seeds import stream_seed

MAX_BODY_BYTES = 4 << 20
MAX_CHOICES = 16
MAX_STOP_STRINGS = 4
MAX_TOP_LOGPROBS = 20
MAX_PROMPTS = 16
"""Prompts in one ``/v1/completions`` request (each gets ``n`` choices)."""
TEXT_DEFAULT_MAX_TOKENS = 16
"""OpenAI's default ``max_tokens`` for ``/v1/completions``."""

Choice = tuple[dict[str, Any], int]
"""A finished choice of a response and the tokens it counts in ``usage``."""


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


def _flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{name}: expected true or false, got {value!r}", name)
    return bool(value)


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


def _finish_reason(completion: Completion, stopped_by_string: bool) -> str:
    return "length" if completion.finish_reason == "length" and not stopped_by_string else "stop"


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
    allowed_hosts: Sequence[str] = ("*",),
):
    """The ASGI app serving ``service`` (see the module docstring). ``renderer``: the model's
    chat template; ``parser``: its tool-call format; ``max_context``: most prompt +
    completion tokens per call; ``default_max_tokens``: a chat completion's limit when the
    request names none."""
    app = FastAPI(title="agentic-rl gateway", docs_url=None, redoc_url=None, openapi_url=None)
    store = store if store is not None else EpisodeStore()
    app.state.store = store
    install_guard(app, token=token, allowed_hosts=allowed_hosts, max_body_bytes=MAX_BODY_BYTES, error=error_response)
    tokenizer = renderer.tokenizer
    vocabulary = len(tokenizer)
    tools_in_template = renderer.render_tools(parser)
    output_in_template = tools_in_template and renderer.frames_tool_output(
        parser
    )  # Qwen's <tool_response>: results go bare, as in ToolEnv

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

    def sampling(body: dict, limit: int, room: int, seed: int | None, count: int, top_logprobs: int) -> list[dict]:
        """``service.submit`` arguments for ``count`` choices: choice i draws from stream i of the seed."""
        temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
        top_p = _number(body, "top_p", 1.0, 1e-6, 1.0)
        base = seed if seed is not None else random.getrandbits(62)
        return [
            {
                "max_tokens": min(limit, room),
                "seed": stream_seed(base, i),
                "temperature": temperature,
                "top_p": top_p,
                "top_logprobs": top_logprobs,
            }
            for i in range(count)
        ]

    def alternatives(k: int, param: str) -> int:
        if k and not service.supports_top_logprobs:
            raise RequestError(f"{param}: this engine returns only the sampled tokens' log-probs", param)
        return k

    async def gather(jobs: list[dict]) -> list[Completion]:
        futures = [service.submit(**job) for job in jobs]
        try:
            return await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        except asyncio.CancelledError:  # the client went away: its requests need no answer
            for future in futures:
                future.cancel()
            raise

    def envelope(id_prefix: str, kind: str, choices: list, prompt_tokens: int, completions: list) -> dict:
        """The non-streamed response around ``(choice, completion tokens)`` pairs, with usage."""
        used = sum(count for _, count in choices)
        return {
            "id": f"{id_prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": model_name,
            "choices": [choice for choice, _ in choices],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": used, "total_tokens": prompt_tokens + used},
            "system_fingerprint": f"weights-v{completions[0].weight_version}",
        }

    async def respond(request: Request, episode_id: str | None, handler):
        try:
            body = await read_json(request)
            return await handler(body, episode_id or request.headers.get("x-episode-id"))
        except RequestError as error:
            return error_response(400, str(error), error.param)

    # ------------------------------------------------------------------ chat completions

    async def chat(body: dict, episode_id: str | None):
        messages = body.get("messages")
        schemas = tool_schemas(body.get("tools"))
        tool_choice = body.get("tool_choice", "auto")
        if tool_choice not in ("auto", "none", "required", None) and not isinstance(tool_choice, dict):
            raise RequestError(
                "tool_choice: expected auto, none, required or {type: function, function: {name}}", "tool_choice"
            )
        in_template = bool(schemas) and tools_in_template
        model_messages = to_model_messages(
            messages, schemas, parser, describe_tools=not in_template, framed=in_template and output_in_template
        )
        n = _integer(body, "n", 1, 1, MAX_CHOICES)
        limit = _integer(body, "max_completion_tokens", None, 1, max_context) or _integer(
            body, "max_tokens", default_max_tokens, 1, max_context
        )
        seed = _integer(body, "seed", None, -(2**63), 2**63 - 1)
        stops = _stops(body)
        want_logprobs = _flag(body, "logprobs")
        top_k = _integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
        if body.get("top_logprobs") is not None and not want_logprobs:
            raise RequestError("top_logprobs: needs logprobs: true", "top_logprobs")
        top_k = alternatives(top_k, "top_logprobs")
        stream = _flag(body, "stream")
        tools_key = json.dumps(schemas, sort_keys=True)
        continued = store.continuation(episode_id, messages, tools_key) if episode_id else None
        if continued is not None:  # the history is a call we served: append only the new messages' tokens
            call, start = continued
            tail = model_messages[len(model_messages) - (len(messages) - start) :]
            prompt = (
                call.prompt_ids
                + call.completion_ids
                + renderer.observation_ids(tail, stopped=call.finish_reason != "length")
            )
        else:
            prompt = renderer.prompt_ids(model_messages, tools=schemas if in_template else None)
        room = max_context - len(prompt)
        if room < 1:
            raise RequestError(
                f"messages: the prompt is {len(prompt)} tokens; this server allows {max_context} in all", "messages"
            )
        if seed is None and episode_id:
            seed = store.request_seed(episode_id)
        jobs = [{"prompt": prompt, **options} for options in sampling(body, limit, room, seed, n, top_k)]
        parse_tools = bool(schemas) and tool_choice != "none"

        def finish(index: int, completion: Completion) -> Choice:
            ids, text, stopped_by_string = _cut_at_stop(renderer, completion.token_ids, stops)
            logprobs = completion.logprobs[: len(ids)]
            message, calls = reply_message(text, parser if parse_tools else None)
            finish_reason = "tool_calls" if calls else _finish_reason(completion, stopped_by_string)
            if episode_id:
                store.record(
                    episode_id,
                    Call(
                        prompt,
                        ids,
                        logprobs,
                        completion.weight_version,
                        "stop" if finish_reason != "length" else "length",
                        messages=list(messages),
                        reply=message,
                        tools=tools_key,
                    ),
                )
            choice = {"index": index, "message": message, "finish_reason": finish_reason, "logprobs": None}
            if want_logprobs:
                top = completion.top_logprobs or [[] for _ in ids]
                choice["logprobs"] = {
                    "content": [_token_logprob(tokenizer, t, lp, alts) for t, lp, alts in zip(ids, logprobs, top)]
                }
            return choice, len(ids)

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if stream:
            markers = stops + ([parser.call_open_tag] if parse_tools and parser.call_open_tag else [])
            live = [
                LiveText(
                    renderer,
                    markers,
                    hold_trailing_space=parse_tools,
                    hold_all=parse_tools and not parser.call_open_tag,
                )
                for _ in jobs
            ]
            events = _chat_stream(service, jobs, live, finish, model_name, len(prompt), include_usage)
            return StreamingResponse(events, media_type="text/event-stream")
        completions = await gather(jobs)
        failed = next((c.error for c in completions if c.error is not None), None)
        if failed is not None:
            return error_response(500, f"the engine failed: {failed}")
        return envelope(
            "chatcmpl",
            "chat.completion",
            [finish(index, completion) for index, completion in enumerate(completions)],
            len(prompt),
            completions,
        )

    @app.post("/v1/chat/completions")
    async def chat_plain(request: Request):
        return await respond(request, None, chat)

    @app.post("/episodes/{episode_id}/v1/chat/completions")
    async def chat_episode(episode_id: str, request: Request):
        return await respond(request, episode_id, chat)

    # ------------------------------------------------------------------ text completions

    def prompts_of(body: dict) -> list[tuple[list[int], str]]:
        """(token ids, text) of each prompt: a string, token ids, or a list of either."""
        prompt = body.get("prompt")

        def one(item: Any) -> tuple[list[int], str]:
            if isinstance(item, str) and item:
                return tokenizer(item)["input_ids"], item
            if isinstance(item, list) and item and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
                if not all(0 <= t < vocabulary for t in item):
                    raise RequestError(f"prompt: token ids must be in [0, {vocabulary})", "prompt")
                return list(item), tokenizer.decode(item)
            raise RequestError(
                "prompt: expected a non-empty string, a non-empty list of token ids, or a list of those", "prompt"
            )

        if isinstance(prompt, list) and prompt and all(isinstance(item, (str, list)) for item in prompt):
            if len(prompt) > MAX_PROMPTS:
                raise RequestError(f"prompt: at most {MAX_PROMPTS} prompts per request", "prompt")
            return [one(item) for item in prompt]
        return [one(prompt)]

    async def text(body: dict, episode_id: str | None):
        prompts = prompts_of(body)
        n = _integer(body, "n", 1, 1, MAX_CHOICES)
        if body.get("best_of") is not None and body.get("best_of") != n:
            raise RequestError("best_of: only best_of = n is served (every sampled choice is returned)", "best_of")
        if body.get("suffix") is not None:
            raise RequestError("suffix: insertion (text after the completion) is not supported", "suffix")
        limit = _integer(body, "max_tokens", TEXT_DEFAULT_MAX_TOKENS, 1, max_context)
        seed = _integer(body, "seed", None, -(2**63), 2**63 - 1)
        stops = _stops(body)
        top_k = _integer(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
        echo = _flag(body, "echo")
        if echo and top_k is not None:
            raise RequestError(
                "echo: not with logprobs (the prompt's log-probs are not computed); ask for one or the other", "echo"
            )
        top_k_engine = alternatives(top_k or 0, "logprobs")
        stream = _flag(body, "stream")
        longest = max(len(ids) for ids, _ in prompts)
        room = max_context - longest
        if room < 1:
            raise RequestError(
                f"prompt: the prompt is {longest} tokens; this server allows {max_context} in all", "prompt"
            )
        if seed is None and episode_id:
            seed = store.request_seed(episode_id)
        options = sampling(body, limit, room, seed, len(prompts) * n, top_k_engine)
        jobs = [
            {
                "prompt": prompts[index // n][0],
                **options[index],
                "max_tokens": min(limit, max_context - len(prompts[index // n][0])),
            }
            for index in range(len(options))
        ]

        def finish(index: int, completion: Completion) -> Choice:
            prompt_ids, prompt_text = prompts[index // n]
            ids, completion_text, stopped_by_string = _cut_at_stop(renderer, completion.token_ids, stops)
            logprobs = completion.logprobs[: len(ids)]
            finish_reason = _finish_reason(completion, stopped_by_string)
            if episode_id:
                store.record(
                    episode_id,
                    Call(
                        prompt_ids,
                        ids,
                        logprobs,
                        completion.weight_version,
                        finish_reason,
                        reply={"role": "assistant", "content": completion_text},
                        kind="completion",
                    ),
                )
            choice = {
                "index": index,
                "text": prompt_text + completion_text if echo else completion_text,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if top_k is not None:
                choice["logprobs"] = _text_logprobs(tokenizer, ids, logprobs, completion.top_logprobs)
            return choice, len(ids)

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        prompt_tokens = sum(len(ids) for ids, _ in prompts)
        if stream:
            live = [LiveText(renderer, stops) for _ in jobs]
            echoes = [prompts[index // n][1] if echo else "" for index in range(len(jobs))]
            events = _text_stream(service, jobs, live, finish, model_name, prompt_tokens, include_usage, echoes)
            return StreamingResponse(events, media_type="text/event-stream")
        completions = await gather(jobs)
        failed = next((c.error for c in completions if c.error is not None), None)
        if failed is not None:
            return error_response(500, f"the engine failed: {failed}")
        return envelope(
            "cmpl",
            "text_completion",
            [finish(index, completion) for index, completion in enumerate(completions)],
            prompt_tokens,
            completions,
        )

    @app.post("/v1/completions")
    async def text_plain(request: Request):
        return await respond(request, None, text)

    @app.post("/episodes/{episode_id}/v1/completions")
    async def text_episode(episode_id: str, request: Request):
        return await respond(request, episode_id, text)

    # ------------------------------------------------------------------ episodes

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
        return {
            "episode_id": episode_id,
            "reward": trace.reward,
            "info": trace.info,
            "calls": [call.to_dict() for call in trace.calls],
        }

    return app


def _token_logprob(tokenizer, token: int, logprob: float, alternatives: list[tuple[int, float]]) -> dict[str, Any]:
    """One entry of a chat choice's ``logprobs.content``."""

    def entry(token_id: int, value: float) -> dict[str, Any]:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": value, "bytes": list(text.encode("utf-8"))}

    return {**entry(token, logprob), "top_logprobs": [entry(t, v) for t, v in alternatives]}


def _text_logprobs(
    tokenizer, ids: list[int], logprobs: list[float], top: list[list[tuple[int, float]]] | None
) -> dict[str, Any]:
    """A text choice's legacy ``logprobs`` object: each token's text, its log-prob, the most
    likely alternatives by text (with the sampled token, as OpenAI gives k + 1 at most) and
    its offset in the completion text (the sum of the earlier tokens' texts)."""
    tokens = [tokenizer.decode([t]) for t in ids]
    offsets, position = [], 0
    for piece in tokens:
        offsets.append(position)
        position += len(piece)
    top_logprobs = []
    for i, (piece, value) in enumerate(zip(tokens, logprobs)):
        entry = {tokenizer.decode([t]): v for t, v in (top[i] if top else [])}
        entry.setdefault(piece, value)
        top_logprobs.append(entry)
    return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": top_logprobs, "text_offset": offsets}


def _event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body)}\n\n"


def _engine_error(error: Any) -> str:
    return _event(
        {"error": {"message": f"the engine failed: {error}", "type": "server_error", "param": None, "code": None}}
    )


async def _chat_stream(
    service: CompletionService,
    jobs: list[dict],
    live: list[LiveText],
    finish: Callable[[int, Completion], Choice],
    model: str,
    prompt_tokens: int,
    include_usage: bool,
):
    """A chat completion's server-sent events: each choice's role, its text as it becomes
    safe to send, then (once finished) the rest of its content, its tool calls in OpenAI's
    delta form, its log-probs and finish reason; the usage; ``[DONE]``."""
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"weights-v{service.weight_version}",
    }

    def chunk(index: int, delta: dict, finish_reason: str | None = None, logprobs: dict | None = None) -> str:
        return _event(
            {
                **head,
                "choices": [{"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}],
            }
        )

    for index in range(len(jobs)):
        yield chunk(index, {"role": "assistant"})
    usage = 0
    async for index, item in sampled(service, jobs):
        if isinstance(item, list):
            if delta := live[index].add(item):
                yield chunk(index, {"content": delta})
            continue
        if isinstance(item, BaseException) or item.error is not None:
            yield _engine_error(item if isinstance(item, BaseException) else item.error)
            return
        choice, count = finish(index, item)
        usage += count
        message = choice["message"]
        rest = live[index].rest(message.get("content"))
        if rest is not None:
            yield chunk(index, {"content": rest})
        for position, call in enumerate(message.get("tool_calls") or []):
            function = call["function"]
            yield chunk(
                index,
                {
                    "tool_calls": [
                        {
                            "index": position,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                },
            )
            yield chunk(index, {"tool_calls": [{"index": position, "function": {"arguments": function["arguments"]}}]})
        yield chunk(index, {}, choice["finish_reason"], choice["logprobs"])
    if include_usage:
        yield _event(
            {
                **head,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": usage,
                    "total_tokens": prompt_tokens + usage,
                },
            }
        )
    yield "data: [DONE]\n\n"


async def _text_stream(
    service: CompletionService,
    jobs: list[dict],
    live: list[LiveText],
    finish: Callable[[int, Completion], Choice],
    model: str,
    prompt_tokens: int,
    include_usage: bool,
    echoes: list[str],
):
    """A text completion's server-sent events: each choice's echoed prompt (when asked), its
    text as it becomes safe to send, then the rest with its log-probs and finish reason;
    the usage; ``[DONE]``."""
    head = {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"weights-v{service.weight_version}",
    }

    def chunk(index: int, text: str, finish_reason: str | None = None, logprobs: dict | None = None) -> str:
        return _event(
            {**head, "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}]}
        )

    for index, echo in enumerate(echoes):
        if echo:
            yield chunk(index, echo)
    usage = 0
    async for index, item in sampled(service, jobs):
        if isinstance(item, list):
            if delta := live[index].add(item):
                yield chunk(index, delta)
            continue
        if isinstance(item, BaseException) or item.error is not None:
            yield _engine_error(item if isinstance(item, BaseException) else item.error)
            return
        choice, count = finish(index, item)
        usage += count
        completion_text = choice["text"][len(echoes[index]) :]
        yield chunk(index, live[index].rest(completion_text) or "", choice["finish_reason"], choice["logprobs"])
    if include_usage:
        yield _event(
            {
                **head,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": usage,
                    "total_tokens": prompt_tokens + usage,
                },
            }
        )
    yield "data: [DONE]\n\n"

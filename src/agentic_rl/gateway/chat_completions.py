"""``POST /v1/chat/completions``: messages through the model's chat template (or, within an
episode, the tokens served before plus the new messages' tokens), tool calls parsed from
the reply, every served call recorded with its exact token ids."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from fastapi.responses import StreamingResponse

from agentic_rl.engines.base import Completion
from agentic_rl.gateway.chat import RequestError, reply_message, to_model_messages, tool_schemas
from agentic_rl.gateway.fields import (
    MAX_CHOICES,
    MAX_TOP_LOGPROBS,
    error_response,
    flag,
    include_usage,
    integer,
    role_field,
    seed_field,
    stop_strings,
)
from agentic_rl.gateway.history import digest, prefix_digests
from agentic_rl.gateway.responses import Choice, cut_at_stop, finish_reason, token_logprob
from agentic_rl.gateway.sse import chat_stream
from agentic_rl.gateway.state import GatewayState
from agentic_rl.gateway.streaming import LiveText
from agentic_rl.gateway.traces import Call


@dataclass
class ChatRequest:
    """A validated chat completion request, its prompt ids and one engine job per choice."""

    history: str
    """The digest of the request's messages (what a call records instead of them)."""
    history_length: int
    tools_key: str
    """The digest of the request's tools."""
    prompt: list[int]
    jobs: list[dict]
    stops: list[str]
    want_logprobs: bool
    parse_tools: bool
    stream: bool
    include_usage: bool
    role: str = ""
    """The request's ``model``: the role its recorded calls belong to."""


def parse_chat(state: GatewayState, body: dict, episode_id: str | None) -> ChatRequest:
    """The request's fields checked (a ``RequestError`` names the bad one) and its prompt built."""
    messages = body.get("messages")
    schemas = tool_schemas(body.get("tools"))
    tool_choice = body.get("tool_choice", "auto")
    if tool_choice not in ("auto", "none", "required", None) and not isinstance(tool_choice, dict):
        raise RequestError(
            "tool_choice: expected auto, none, required or {type: function, function: {name}}", "tool_choice"
        )
    in_template = bool(schemas) and state.tools_in_template
    model_messages = to_model_messages(
        messages, schemas, state.parser, describe_tools=not in_template, framed=in_template and state.output_in_template
    )
    n = integer(body, "n", 1, 1, MAX_CHOICES)
    limit = integer(body, "max_completion_tokens", None, 1, state.max_context) or integer(
        body, "max_tokens", state.default_max_tokens, 1, state.max_context
    )
    seed = seed_field(body)
    stops = stop_strings(body)
    want_logprobs = flag(body, "logprobs")
    top_k = integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if body.get("top_logprobs") is not None and not want_logprobs:
        raise RequestError("top_logprobs: needs logprobs: true", "top_logprobs")
    top_k = state.alternatives(top_k, "top_logprobs")
    stream = flag(body, "stream")
    tools_key = digest(json.dumps(schemas, sort_keys=True, ensure_ascii=False))
    digests = prefix_digests(messages)
    continued = state.store.continuation(episode_id, digests, messages, tools_key) if episode_id else None
    if continued is not None:  # the history is a call we served: append only the new messages' tokens
        call, start = continued
        tail = model_messages[len(model_messages) - (len(messages) - start) :]
        observation = state.renderer.observation_ids(tail, stopped=call.finish_reason != "length")
        prompt = call.prompt_ids + call.completion_ids + observation
    else:
        prompt = state.renderer.prompt_ids(model_messages, tools=schemas if in_template else None)
    room = state.max_context - len(prompt)
    if room < 1:
        raise RequestError(
            f"messages: the prompt is {len(prompt)} tokens; this server allows {state.max_context} in all", "messages"
        )
    if episode_id:
        state.store.admit(episode_id, n, n * 8 * (len(prompt) + 2 * min(limit, room)))
    seed = state.request_seed(seed, episode_id)
    jobs = [{"prompt": prompt, **options} for options in state.sampling(body, limit, room, seed, n, top_k)]
    parse_tools = bool(schemas) and tool_choice != "none"
    usage = include_usage(body)
    return ChatRequest(
        digests[-1],
        len(messages),
        tools_key,
        prompt,
        jobs,
        stops,
        want_logprobs,
        parse_tools,
        stream,
        usage,
        role_field(body),
    )


def chat_finisher(
    state: GatewayState, request: ChatRequest, episode_id: str | None
) -> Callable[[int, Completion], Choice]:
    """What turns a finished completion into its choice (recording the call in the episode)."""

    def finish(index: int, completion: Completion) -> Choice:
        ids, text, stopped_by_string = cut_at_stop(state.renderer, completion.token_ids, request.stops)
        logprobs = completion.logprobs[: len(ids)]
        message, calls = reply_message(text, state.parser if request.parse_tools else None)
        reason = "tool_calls" if calls else finish_reason(completion, stopped_by_string)
        if episode_id:
            call = Call(
                request.prompt,
                ids,
                logprobs,
                completion.weight_version,
                "stop" if reason != "length" else "length",
                history=request.history,
                history_length=request.history_length,
                reply=message,
                tools=request.tools_key,
                role=request.role,
            )
            state.store.record(episode_id, call)
        choice = {"index": index, "message": message, "finish_reason": reason, "logprobs": None}
        if request.want_logprobs:
            top = completion.top_logprobs or [[] for _ in ids]
            content = [token_logprob(state.tokenizer, t, lp, alts) for t, lp, alts in zip(ids, logprobs, top)]
            choice["logprobs"] = {"content": content}
        return choice, len(ids)

    return finish


async def chat_completion(state: GatewayState, body: dict, episode_id: str | None):
    request = parse_chat(state, body, episode_id)
    finish = chat_finisher(state, request, episode_id)
    if request.stream:
        parser = state.parser
        markers = request.stops + ([parser.call_open_tag] if request.parse_tools and parser.call_open_tag else [])
        live = [
            LiveText(
                state.renderer,
                markers,
                hold_trailing_space=request.parse_tools,
                hold_all=request.parse_tools and not parser.call_open_tag,
            )
            for _ in request.jobs
        ]
        events = chat_stream(
            state.service, request.jobs, live, finish, state.model_name, len(request.prompt), request.include_usage
        )
        return StreamingResponse(events, media_type="text/event-stream")
    completions = await state.gather(request.jobs)
    failed = next((c.error for c in completions if c.error is not None), None)
    if failed is not None:
        return error_response(500, f"the engine failed: {failed}")
    choices = [finish(index, completion) for index, completion in enumerate(completions)]
    return state.envelope("chatcmpl", "chat.completion", choices, len(request.prompt), completions)

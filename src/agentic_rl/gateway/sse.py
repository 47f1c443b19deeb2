"""Server-sent events of streamed completions: each choice's text as it becomes safe to
send (choices interleaved, each with its own index), then its end, the usage, ``[DONE]``."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentic_rl.engines.base import Completion
from agentic_rl.gateway.responses import Choice
from agentic_rl.gateway.service import CompletionService
from agentic_rl.gateway.streaming import LiveText, sampled


def event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body)}\n\n"


def engine_error(error: Any) -> str:
    return event(
        {"error": {"message": f"the engine failed: {error}", "type": "server_error", "param": None, "code": None}}
    )


async def chat_stream(
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
        return event(
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
            yield engine_error(item if isinstance(item, BaseException) else item.error)
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
        yield event(
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


async def text_stream(
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
        return event(
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
            yield engine_error(item if isinstance(item, BaseException) else item.error)
            return
        choice, count = finish(index, item)
        usage += count
        completion_text = choice["text"][len(echoes[index]) :]
        yield chunk(index, live[index].rest(completion_text) or "", choice["finish_reason"], choice["logprobs"])
    if include_usage:
        yield event(
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

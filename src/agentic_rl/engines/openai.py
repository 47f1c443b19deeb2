"""A chat-level backend for any OpenAI-compatible ``/chat/completions`` endpoint.

Remote endpoints take messages, not token ids, so this backend cannot produce
token-exact trajectories for training; it exists to evaluate hosted or served models
(vLLM, SGLang, llama.cpp, OpenAI) with the same rollout engine. Only ``httpx`` is used.

Tools: a conversation's tools (the env's function schemas) go in the request's ``tools``,
its history in OpenAI's structured form (``tool_calls``, ``tool`` messages tied to their
call ids); calls the server parsed itself (vLLM with a tool parser, OpenAI) come back as
``tool_calls`` and are written into the reply's text in the env's tool-call format, so the
env sees what it would see from a model writing that format. A server that returns plain
text is read as text (the env parses its calls). A server that refuses ``tools`` gets the
plain text conversation from then on.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentic_rl.engines.http import BackendError, one_line, post_json
from agentic_rl.parsers import ToolCallParser, get_parser
from agentic_rl.parsers.messages import openai_messages
from agentic_rl.types import Message, ToolCall, openai_tools

__all__ = ["BackendError", "ChatCompletion", "OpenAIChatBackend"]

# Servers differ in which message keys they accept; these are understood everywhere.
_MESSAGE_KEYS = ("role", "content", "name", "tool_call_id")
"""Kept of a message in the plain (text) request; the structured one is built in full."""


@dataclass
class ChatCompletion:
    """One generated reply."""

    text: str
    finish_reason: str
    """``"stop"`` or ``"length"``; other server values are normalised to ``"stop"``."""
    token_logprobs: list[float] | None
    """Per generated token, when the server returned them."""
    completion_tokens: int | None
    """``usage.completion_tokens`` when reported."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Calls the server parsed itself (its ``tool_calls``); ``text`` holds them too, written
    in the request's tool-call format."""


class OpenAIChatBackend:
    """Sends chat conversations to ``{base_url}/chat/completions``, concurrently.

    Args:
        model: model name sent with every request.
        base_url: endpoint root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key: Bearer token; defaults to ``$OPENAI_API_KEY``; no header when neither.
        timeout_s: per-request timeout.
        max_concurrency: requests in flight at once.
        max_retries: extra attempts on connection errors, 5xx and 429.
        request_logprobs: ask for per-token logprobs (dropped automatically if the
            server rejects the field).
        retry_backoff_s: base delay before retry i is ``retry_backoff_s * 2**i``.
        send_tools: send a conversation's tools and structured history (dropped
            automatically if the server rejects ``tools``).
        parser: the tool-call format replies are written in when ``chat`` names none.
    """

    interface = "chat"
    weight_version = 0

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_concurrency: int = 8,
        max_retries: int = 2,
        request_logprobs: bool = True,
        retry_backoff_s: float = 0.5,
        send_tools: bool = True,
        parser: ToolCallParser | str = "hermes",
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries = max(0, max_retries)
        self.request_logprobs = request_logprobs
        self.retry_backoff_s = retry_backoff_s
        self.send_tools = send_tools
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            timeout=timeout_s,
            headers=headers,
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="openai-chat")
        self._lock = threading.Lock()

    def chat(
        self,
        conversations: list[list[dict]],
        *,
        temperature: float,
        top_p: float,
        max_tokens: int,
        seed: int | None = None,
        stop: list[str] | None = None,
        tools: Sequence[list[dict] | None] | None = None,
        parser: ToolCallParser | str | None = None,
    ) -> list[ChatCompletion]:
        """One completion per conversation, in input order. ``tools``: per conversation, the
        function schemas it offers (None: none); ``parser``: the tool-call format of the
        conversations' text (default: the backend's).

        Raises:
            BackendError: if any request fails after retries.
        """
        parser = self.parser if parser is None else get_parser(parser) if isinstance(parser, str) else parser
        base: dict[str, Any] = {
            "model": self.model,
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_tokens,
        }
        if seed is not None:
            base["seed"] = seed
        if stop:
            base["stop"] = list(stop)
        requests = []
        for conversation, schemas in zip(conversations, tools or [None] * len(conversations), strict=True):
            plain = {**base, "messages": [{k: m[k] for k in _MESSAGE_KEYS if k in m} for m in conversation]}
            structured = _with_tools(plain, conversation, schemas, parser) if schemas else None
            requests.append((structured, plain, parser))
        # map() yields in submission order, whatever order the requests finish in.
        return list(self._pool.map(self._complete, requests))

    def sync_weights(self, source=None) -> int:
        """A remote endpoint serves weights this process cannot push: training needs a token engine."""
        raise NotImplementedError(
            f"{self.url}: an OpenAI-compatible endpoint cannot take the trainer's weights; train with backend.kind 'hf'"
        )

    def close(self) -> None:
        """Release the worker threads and HTTP connections."""
        self._pool.shutdown(wait=True)
        self._client.close()

    def __enter__(self) -> OpenAIChatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _complete(self, request: tuple[dict[str, Any] | None, dict[str, Any], ToolCallParser]) -> ChatCompletion:
        structured, plain, parser = request
        if structured is not None and self.send_tools:
            try:
                return self._post(structured, parser)
            except BackendError as error:
                if not _refused(error, "tool"):
                    raise
                # The server takes no tools (e.g. no tool parser configured): plain text from now on.
                with self._lock:
                    self.send_tools = False
        return self._post(plain, parser)

    def _post(self, payload: dict[str, Any], parser: ToolCallParser) -> ChatCompletion:
        if self.request_logprobs:
            try:
                return _parse(
                    post_json(
                        self._client,
                        self.url,
                        {**payload, "logprobs": True},
                        max_retries=self.max_retries,
                        backoff_s=self.retry_backoff_s,
                    ),
                    self.url,
                    parser,
                )
            except BackendError as error:
                if not _refused(error, "logprobs"):
                    raise
                # Some servers refuse the field outright; stop asking, retry for free.
                with self._lock:
                    self.request_logprobs = False
        return _parse(
            post_json(self._client, self.url, payload, max_retries=self.max_retries, backoff_s=self.retry_backoff_s),
            self.url,
            parser,
        )


def _refused(error: BackendError, field_name: str) -> bool:
    """Whether the server answered HTTP 400 naming ``field_name``."""
    return "HTTP 400" in str(error) and field_name in str(error).lower()


def _with_tools(
    plain: dict[str, Any], conversation: list[Message], schemas: list[dict], parser: ToolCallParser
) -> dict[str, Any] | None:
    """The request with ``tools`` and the history in OpenAI's structured form (calls as
    ``tool_calls``, results as ``tool`` messages tied to them; a result with no call to
    answer, such as a malformed call's error, as a user message). None when the history's
    text cannot be structured (a tool message not framed in ``parser``'s format)."""
    try:
        messages = openai_messages(conversation, parser, exact=False)
    except ValueError:
        return None
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            message.pop("name", None)  # not part of OpenAI's tool message
            if "tool_call_id" not in message:
                messages[index] = {"role": "user", "content": parser.wrap_observation(message["content"])}
        elif message["role"] == "assistant" and message.get("tool_calls") and not message.get("content"):
            message["content"] = None
    return {**plain, "messages": messages, "tools": openai_tools(schemas)}


def _tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    """The server's parsed ``tool_calls`` (arguments that are not a JSON object stay text,
    for the env's parser to report)."""
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        raw = function.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            arguments = raw
        calls.append(
            ToolCall(
                name=str(function.get("name", "")),
                arguments=arguments if arguments is not None else {},
                id=str(call.get("id") or f"call_{index}"),
            )
        )
    return calls


def _call_text(call: ToolCall, parser: ToolCallParser) -> str:
    """``call`` written in ``parser``'s format; arguments that are not an object are kept as
    the format writes them, or dropped where it cannot (the env then reports the call)."""
    try:
        return parser.format_call(call)
    except (AttributeError, TypeError, ValueError):
        return parser.format_call(ToolCall(call.name, {}, call.id))


def _parse(response: httpx.Response, url: str, parser: ToolCallParser) -> ChatCompletion:
    try:
        data = response.json()
        choice = data["choices"][0]
        usage = data.get("usage") or {}
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise BackendError(
            f"POST {url} returned HTTP 200 with an unreadable body: {one_line(response.text)}"
        ) from error
    message = choice.get("message") or {}
    logprobs = choice.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    tokens = usage.get("completion_tokens")
    calls = _tool_calls(message)
    text = message.get("content") or ""
    if calls:  # the env reads the calls from the text, in its own format
        blocks = "\n".join(_call_text(call, parser) for call in calls)
        text = text + ("\n" if text and blocks else "") + blocks
    return ChatCompletion(
        text=text,
        finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
        token_logprobs=[float(entry["logprob"]) for entry in content] if content is not None else None,
        completion_tokens=int(tokens) if tokens is not None else None,
        tool_calls=calls,
    )

"""A chat-level backend for any OpenAI-compatible ``/chat/completions`` endpoint.

Remote endpoints take messages, not token ids, so this backend cannot produce
token-exact trajectories for training; it exists to evaluate hosted or served models
(vLLM, SGLang, llama.cpp, OpenAI) with the same rollout engine. Only ``httpx`` is used.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from agentic_rl.engines.http import BackendError, one_line, post_json

__all__ = ["BackendError", "ChatCompletion", "OpenAIChatBackend"]

# Servers differ in which message keys they accept; these are understood everywhere.
_MESSAGE_KEYS = ("role", "content", "name", "tool_call_id")


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
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries = max(0, max_retries)
        self.request_logprobs = request_logprobs
        self.retry_backoff_s = retry_backoff_s
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
    ) -> list[ChatCompletion]:
        """One completion per conversation, in input order.

        Raises:
            BackendError: if any request fails after retries.
        """
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
        payloads = [
            {**base, "messages": [{k: m[k] for k in _MESSAGE_KEYS if k in m} for m in conversation]}
            for conversation in conversations
        ]
        # map() yields in submission order, whatever order the requests finish in.
        return list(self._pool.map(self._complete, payloads))

    def sync_weights(self, source=None) -> int:
        """A remote endpoint serves weights this process cannot push: training needs a token engine."""
        raise NotImplementedError(f"{self.url}: an OpenAI-compatible endpoint cannot take the trainer's weights; train with backend.kind 'hf'")

    def close(self) -> None:
        """Release the worker threads and HTTP connections."""
        self._pool.shutdown(wait=True)
        self._client.close()

    def __enter__(self) -> OpenAIChatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _complete(self, payload: dict[str, Any]) -> ChatCompletion:
        if self.request_logprobs:
            try:
                return _parse(post_json(self._client, self.url, {**payload, "logprobs": True}, max_retries=self.max_retries, backoff_s=self.retry_backoff_s), self.url)
            except BackendError as error:
                if "HTTP 400" not in str(error) or "logprobs" not in str(error).lower():
                    raise
                # Some servers refuse the field outright; stop asking, retry for free.
                with self._lock:
                    self.request_logprobs = False
        return _parse(post_json(self._client, self.url, payload, max_retries=self.max_retries, backoff_s=self.retry_backoff_s), self.url)


def _parse(response: httpx.Response, url: str) -> ChatCompletion:
    try:
        data = response.json()
        choice = data["choices"][0]
        usage = data.get("usage") or {}
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise BackendError(f"POST {url} returned HTTP 200 with an unreadable body: {one_line(response.text)}") from error
    message = choice.get("message") or {}
    logprobs = choice.get("logprobs") or {}
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    tokens = usage.get("completion_tokens")
    return ChatCompletion(
        text=message.get("content") or "",
        finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
        token_logprobs=[float(entry["logprob"]) for entry in content] if content is not None else None,
        completion_tokens=int(tokens) if tokens is not None else None,
    )

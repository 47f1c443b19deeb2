"""JSON over HTTP with retries: what the remote engines (OpenAI-compatible chat, vLLM, SGLang)
share. Connection errors, 5xx and 429 are retried with exponential backoff; anything else
fails at once with the server's message on one line."""

from __future__ import annotations

import time
from typing import Any

import httpx

from agentic_rl.config.secrets import redact_urls

RETRY_STATUS = {429} | set(range(500, 600))


class BackendError(RuntimeError):
    """A request failed for good (after retries, or with a non-retryable status). The
    message names the endpoint with any credentials in its URLs as ``***`` (errors end up
    in logs and reports)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_urls(message))


def one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def post_json(
    client: httpx.Client, url: str, body: dict[str, Any], *, max_retries: int = 2, backoff_s: float = 0.5
) -> httpx.Response:
    """POST ``body``; the 200 response, else :class:`BackendError` after ``max_retries``
    extra attempts on retryable failures."""
    attempt = 0
    while True:
        try:
            response = client.post(url, json=body)
        except httpx.TransportError as error:  # connection refused/reset, timeouts
            if attempt >= max_retries:
                raise BackendError(
                    f"POST {url} failed after {attempt + 1} attempts: {type(error).__name__}: {error}"
                ) from error
        else:
            if response.status_code == 200:
                return response
            if response.status_code not in RETRY_STATUS or attempt >= max_retries:
                raise BackendError(f"POST {url} failed with HTTP {response.status_code}: {one_line(response.text)}")
        time.sleep(backoff_s * 2**attempt)
        attempt += 1


def json_body(response: httpx.Response) -> Any:
    """The response's JSON, or a :class:`BackendError` naming the URL and the body."""
    try:
        return response.json()
    except ValueError as error:
        raise BackendError(
            f"{response.request.url} returned HTTP {response.status_code} with an unreadable body: {one_line(response.text)}"
        ) from error

"""Reading an OpenAI-style request body: JSON with a deadline, typed fields with bounds,
and the OpenAI-style JSON error every bad request gets (a 4xx, never a 5xx)."""

from __future__ import annotations

import asyncio

from fastapi import Request
from fastapi.responses import JSONResponse

from agentic_rl.gateway.chat import RequestError
from agentic_rl.http_guard import loads_bounded

MAX_BODY_BYTES = 4 << 20
MAX_CHOICES = 16
MAX_STOP_STRINGS = 4
MAX_TOP_LOGPROBS = 20
MAX_PROMPTS = 16
"""Prompts in one ``/v1/completions`` request (each gets ``n`` choices)."""
TEXT_DEFAULT_MAX_TOKENS = 16
"""OpenAI's default ``max_tokens`` for ``/v1/completions``."""
BODY_TIMEOUT_S = 30.0


def error_response(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


async def read_json(request: Request) -> dict:
    try:
        raw = await asyncio.wait_for(request.body(), timeout=BODY_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise RequestError(f"the request body did not arrive within {BODY_TIMEOUT_S:g} s", status=408) from None
    try:
        body = loads_bounded(raw or b"{}")
    except ValueError as error:
        raise RequestError(str(error)) from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    return body


def number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"{name}: expected a number in [{low:g}, {high:g}], got {value!r}", name)
    return float(value)


def integer(body: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"{name}: expected an integer in [{low}, {high}], got {value!r}", name)
    return value


def flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{name}: expected true or false, got {value!r}", name)
    return bool(value)


def stop_strings(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOP_STRINGS:
        raise RequestError(f"stop: expected a string or a list of at most {MAX_STOP_STRINGS} non-empty strings", "stop")
    return stops


def seed_field(body: dict) -> int | None:
    return integer(body, "seed", None, -(2**63), 2**63 - 1)


def include_usage(body: dict) -> bool:
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options: expected an object", "stream_options")
    return bool(options.get("include_usage"))


def role_field(body: dict) -> str:
    """The request's ``model``: the role a recorded call belongs to ("" when the request
    names none; any name is served by the policy)."""
    model = body.get("model")
    return model if isinstance(model, str) else ""

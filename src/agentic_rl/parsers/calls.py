"""What the model-family call formats share: finding a JSON value's end in model text,
decoding a call's JSON, checking a call's name and arguments, and the parse loop (call
bodies -> calls and error messages, capped per turn)."""

from __future__ import annotations

import abc
import json
from typing import Any

from agentic_rl.parsers.base import (
    DEFAULT_MAX_ARGUMENT_CHARS,
    ParseResult,
    ToolCallParser,
    argument_size_error,
    check_max_argument_chars,
)
from agentic_rl.types import ToolCall

__all__ = [
    "BodiesParser",
    "ParsedCall",
    "arguments_object",
    "call_from_object",
    "checked_name",
    "decode_json",
    "json_value_end",
]

ParsedCall = tuple[str, dict[str, Any]] | str
"""One call read from a body: (name, arguments), or the error message the model sees."""

_OPENERS, _CLOSERS = "{[", "}]"


def json_value_end(text: str, start: int) -> int | None:
    """The index just past the JSON object or list opening at ``text[start]`` (brackets
    counted outside strings, escapes honoured), or None when it never closes. Only the
    extent is found here; ``json.loads`` judges the content."""
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def decode_json(text: str, where: str) -> tuple[Any, str | None]:
    """(value, None) for valid JSON, else (None, the error message naming ``where``)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        return None, f"invalid JSON in {where}: {error.msg} (line {error.lineno} column {error.colno})"
    except RecursionError:  # e.g. "[" * 100000: model text must not crash the rollout
        return None, f"invalid JSON in {where}: nested too deeply"


def _check_name(name: Any) -> str | None:
    if name is None:
        return 'tool call is missing "name"'
    if not isinstance(name, str) or not name.strip():
        return 'tool call "name" must be a non-empty string'
    return None


def arguments_object(arguments: Any, name: str) -> dict[str, Any] | str:
    """The arguments as a dict (a JSON-encoded string of an object is decoded, OpenAI
    style), or the error message when they are not an object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            pass
    if not isinstance(arguments, dict):
        return f"tool call \"arguments\" of '{name}' must be a JSON object"
    return arguments


def call_from_object(payload: Any, where: str, keys: tuple[str, ...] = ("arguments",)) -> ParsedCall:
    """(name, arguments) of a decoded ``{"name": ..., "arguments": {...}}`` object; the
    arguments under the first of ``keys`` present (none: no arguments)."""
    if not isinstance(payload, dict):
        return f'{where} must be a JSON object with "name" and "{keys[0]}"'
    error = _check_name(payload.get("name"))
    if error:
        return error
    present = [key for key in keys if key in payload]
    if len(present) > 1:
        return f"tool call '{payload['name']}' has both {' and '.join(repr(k) for k in present)}; give one"
    arguments = arguments_object(payload[present[0]] if present else {}, payload["name"])
    return arguments if isinstance(arguments, str) else (payload["name"], arguments)


def checked_name(name: str) -> str | None:
    """The error for a call name read as text (empty, or with spaces inside), else None."""
    if not name:
        return "tool call is missing the tool name"
    if any(char.isspace() for char in name):
        return f"tool name {name[:60]!r} must not contain spaces"
    return None


class BodiesParser(ToolCallParser):
    """A format whose turn splits into call bodies (``_split``), each read into one or more
    calls (``_parse_body``). A body over ``max_argument_chars`` is an error without being
    decoded; calls past ``max_calls_per_turn`` are reported and not run."""

    template_tools = True
    end_tokens: tuple[str, ...] = ()
    """End-of-turn tokens the decoded text may still end with (not content)."""

    def __init__(self, max_calls_per_turn: int = 4, max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS) -> None:
        if max_calls_per_turn < 1:
            raise ValueError("max_calls_per_turn must be at least 1")
        self.max_calls_per_turn = max_calls_per_turn
        self.max_argument_chars = check_max_argument_chars(max_argument_chars)

    @abc.abstractmethod
    def _split(self, text: str) -> tuple[list[str], list[str], list[str]]:
        """(call bodies, the text outside them, structure errors)."""

    @abc.abstractmethod
    def _parse_body(self, body: str) -> list[ParsedCall]:
        """The calls (or errors) of one body."""

    def parse(self, text: str) -> ParseResult:
        text = self._strip_end_tokens(text)
        bodies, outside, structure_errors = self._split(text)
        items: list[ParsedCall] = []
        for body in bodies:
            too_long = argument_size_error(len(body.strip()), self.max_argument_chars)
            items.extend([too_long] if too_long else self._parse_body(body))
        dropped = len(items) - self.max_calls_per_turn
        calls: list[ToolCall] = []
        errors: list[str] = []
        for item in items[: self.max_calls_per_turn]:
            if isinstance(item, str):
                errors.append(item)
            else:
                calls.append(ToolCall(name=item[0], arguments=item[1], id=f"call_{len(calls)}"))
        errors.extend(structure_errors)
        if dropped > 0:
            errors.append(
                f"too many tool calls in one turn: at most {self.max_calls_per_turn} allowed, "
                f"the other {dropped} were not executed"
            )
        content = "\n".join(piece.strip() for piece in outside if piece.strip())
        return ParseResult(calls=calls, errors=errors, content=content)

    def _strip_end_tokens(self, text: str) -> str:
        stripped = text.rstrip()
        for token in self.end_tokens:
            if stripped.endswith(token):
                return stripped[: -len(token)]
        return text


def named_call(name: str, arguments_text: str) -> ParsedCall:
    """(name, arguments) of a call whose name is text and whose arguments are a JSON
    object's text (Mistral, DeepSeek, harmony); the error message otherwise."""
    error = checked_name(name)
    if error:
        return error
    payload, error = decode_json(arguments_text, f"the arguments of '{name}'")
    if error:
        return error
    arguments = arguments_object(payload, name)
    return arguments if isinstance(arguments, str) else (name, arguments)

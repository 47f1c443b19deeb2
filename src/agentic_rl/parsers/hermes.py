"""The Hermes / Qwen tool-call format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

from __future__ import annotations

import json
from typing import Any

from agentic_rl.parsers.base import (
    DEFAULT_MAX_ARGUMENT_CHARS,
    ParseResult,
    ToolCallParser,
    argument_size_error,
    check_max_argument_chars,
    register_parser,
)
from agentic_rl.types import ToolCall

__all__ = ["HermesParser"]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


@register_parser
class HermesParser(ToolCallParser):
    """JSON tool calls inside ``<tool_call>`` tags, several per turn.

    Malformed blocks become entries in ``ParseResult.errors`` (one each) and are not
    executed; whether the tool exists and the arguments fit is checked later by the
    registry and ``Tool.validate``. A block longer than ``max_argument_chars`` is an
    error without being decoded, and so is JSON nested too deep to decode.
    """

    name = "hermes"
    call_open_tag = OPEN_TAG
    template_tools = True

    def __init__(self, max_calls_per_turn: int = 4, max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS) -> None:
        if max_calls_per_turn < 1:
            raise ValueError("max_calls_per_turn must be at least 1")
        self.max_calls_per_turn = max_calls_per_turn
        self.max_argument_chars = check_max_argument_chars(max_argument_chars)

    def parse(self, text: str) -> ParseResult:
        blocks, outside, tag_errors = self._split(text)
        dropped = len(blocks) - self.max_calls_per_turn
        blocks = blocks[: self.max_calls_per_turn]  # bounds the work one turn can trigger
        calls: list[ToolCall] = []
        errors: list[str] = []
        for block in blocks:
            parsed = argument_size_error(len(block.strip()), self.max_argument_chars) or self._parse_block(block)
            if isinstance(parsed, str):
                errors.append(parsed)
            else:
                calls.append(ToolCall(name=parsed[0], arguments=parsed[1], id=f"call_{len(calls)}"))
        errors.extend(tag_errors)
        if dropped > 0:
            errors.append(
                f"too many tool calls in one turn: at most {self.max_calls_per_turn} allowed, "
                f"the other {dropped} were not executed"
            )
        content = "\n".join(piece.strip() for piece in outside if piece.strip())
        return ParseResult(calls=calls, errors=errors, content=content)

    @staticmethod
    def _split(text: str) -> tuple[list[str], list[str], list[str]]:
        """Split text into tag bodies, the text outside the tags, and tag-structure errors."""
        blocks: list[str] = []
        outside: list[str] = []
        errors: list[str] = []
        position = 0
        while True:
            start = text.find(OPEN_TAG, position)
            if start < 0:
                rest = text[position:]
                if CLOSE_TAG in rest:
                    errors.append(f"found {CLOSE_TAG} without a matching {OPEN_TAG}")
                    rest = rest.replace(CLOSE_TAG, "")
                outside.append(rest)
                break
            before = text[position:start]
            if CLOSE_TAG in before:
                errors.append(f"found {CLOSE_TAG} without a matching {OPEN_TAG}")
                before = before.replace(CLOSE_TAG, "")
            outside.append(before)
            end = text.find(CLOSE_TAG, start + len(OPEN_TAG))
            if end < 0:
                errors.append(f"unclosed {OPEN_TAG} tag: end each call with {CLOSE_TAG}")
                break
            blocks.append(text[start + len(OPEN_TAG) : end])
            position = end + len(CLOSE_TAG)
        return blocks, outside, errors

    @staticmethod
    def _parse_block(block: str) -> tuple[str, dict[str, Any]] | str:
        """(name, arguments) of one tag body, or an error message."""
        try:
            payload = json.loads(block)
        except json.JSONDecodeError as error:
            return f"invalid JSON in {OPEN_TAG}: {error.msg} (line {error.lineno} column {error.colno})"
        except RecursionError:
            # e.g. "[" * 100000: the decoder recurses per level; model text must not crash the rollout.
            return f"invalid JSON in {OPEN_TAG}: nested too deeply"
        if not isinstance(payload, dict):
            return f'{OPEN_TAG} must contain a JSON object with "name" and "arguments"'
        name = payload.get("name")
        if name is None:
            return 'tool call is missing "name"'
        if not isinstance(name, str) or not name.strip():
            return 'tool call "name" must be a non-empty string'
        arguments = payload.get("arguments", {})
        if isinstance(arguments, str):
            # OpenAI-style: arguments as a JSON-encoded string.
            try:
                arguments = json.loads(arguments)
            except (json.JSONDecodeError, RecursionError):
                pass
        if not isinstance(arguments, dict):
            return f"tool call \"arguments\" of '{name}' must be a JSON object"
        return name, arguments

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        if not schemas:
            return ""
        tool_lines = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
        example = f'{OPEN_TAG}\n{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}\n{CLOSE_TAG}'
        return (
            f"You can call these tools:\n<tools>\n{tool_lines}\n</tools>\n"
            f"To call a tool, write:\n{example}\n"
            "The result comes back inside <tool_response></tool_response>."
        )

    def format_call(self, call: ToolCall) -> str:
        payload = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        # "<\/" is a valid JSON escape for "</": keeps a closing tag inside an argument string
        # from ending the block early, so parse(format_call(c)) always round-trips.
        payload = payload.replace(CLOSE_TAG, "<\\/tool_call>")
        return f"{OPEN_TAG}\n{payload}\n{CLOSE_TAG}"

"""Mistral tool calls after the ``[TOOL_CALLS]`` token: a JSON list
``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (tokenizer v3/v7: Mistral 7B v0.3,
Mixtral, Nemo) or one ``[TOOL_CALLS]NAME[ARGS]{...}`` per call (v11 with
``[CALL_ID]ID`` before ``[ARGS]``; v13 without: Mistral Small 3.2+, Magistral, Devstral,
Ministral 3)."""

from __future__ import annotations

import json
import re
from typing import Literal

from agentic_rl.parsers.base import DEFAULT_MAX_ARGUMENT_CHARS, register_parser
from agentic_rl.parsers.calls import (
    BodiesParser,
    ParsedCall,
    call_from_object,
    decode_json,
    json_value_end,
    named_call,
)
from agentic_rl.types import ToolCall

__all__ = ["MistralParser", "TOOL_CALLS"]

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_LIST_START = re.compile(r"\[(?![A-Z_]+\])")  # the v3 JSON list, not a token such as [ARGS] or [CALL_ID]
_BARE_NAME = re.compile(r"\s*[^\s{\[]+\s*(?=\{)")  # NAME{...} (the [ARGS] token dropped in decoding)
_SHAPES = f'{TOOL_CALLS}NAME{ARGS}{{JSON arguments}} or {TOOL_CALLS}[{{"name": ..., "arguments": {{...}}}}]'


def _call_extent(segment: str, start: int) -> tuple[int, str | None]:
    """(end of the call that opens ``segment`` at ``start``, error) for the NAME[ARGS]{...} style."""
    args_at = segment.find(ARGS, start)
    if args_at >= 0:
        open_at = args_at + len(ARGS)
        open_at += len(segment[open_at:]) - len(segment[open_at:].lstrip())
        if not segment.startswith("{", open_at):
            name = segment[start:args_at].split(CALL_ID)[0].strip()
            return -1, f"tool call \"arguments\" of '{name}' must be a JSON object"
    else:
        bare = _BARE_NAME.match(segment, start)
        if bare is None:
            return -1, f"after {TOOL_CALLS} write {_SHAPES}"
        open_at = bare.end()
    end = json_value_end(segment, open_at)
    if end is None:
        return -1, f"unclosed JSON arguments after {TOOL_CALLS}: close every {{ with }}"
    return end, None


@register_parser
class MistralParser(BodiesParser):
    """Both Mistral layouts are read; ``style`` picks the one :meth:`format_calls` writes
    (``"args"``: ``[TOOL_CALLS]NAME[ARGS]{...}`` per call, no separator; ``"list"``: one
    ``[TOOL_CALLS]`` and a JSON list). A ``[CALL_ID]`` is read and dropped (ids are
    assigned here). Text before and after the calls is the content. Tool output is framed
    by the chat template (``[TOOL_RESULTS]...[/TOOL_RESULTS]``): observations are bare.
    """

    name = "mistral"
    call_open_tag = TOOL_CALLS
    end_tokens = ("</s>",)

    def __init__(
        self,
        max_calls_per_turn: int = 4,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
        style: Literal["args", "list"] = "args",
    ) -> None:
        super().__init__(max_calls_per_turn, max_argument_chars)
        if style not in ("args", "list"):
            raise ValueError(f"style: expected 'args' or 'list', got {style!r}")
        self.style = style

    def _split(self, text: str) -> tuple[list[str], list[str], list[str]]:
        pieces = text.split(TOOL_CALLS)
        bodies: list[str] = []
        outside = [pieces[0]]
        errors: list[str] = []
        for segment in pieces[1:]:
            start = len(segment) - len(segment.lstrip())
            if _LIST_START.match(segment, start):
                end = json_value_end(segment, start) or -1
                error = None if end > 0 else f"unclosed JSON list after {TOOL_CALLS}: close it with ]"
            else:
                end, error = _call_extent(segment, start)
            if error:
                errors.append(error)
                continue
            bodies.append(segment[start:end])
            outside.append(segment[end:])
        return bodies, outside, errors

    def _parse_body(self, body: str) -> list[ParsedCall]:
        if _LIST_START.match(body):
            payload, error = decode_json(body, f"the {TOOL_CALLS} list")
            if error:
                return [error]
            if not isinstance(payload, list) or not payload:
                return [f"after {TOOL_CALLS} write {_SHAPES}"]
            return [call_from_object(item, f"each call in the {TOOL_CALLS} list") for item in payload]
        head, found, arguments_text = body.partition(ARGS)
        if not found:
            brace = body.index("{")  # _call_extent matched NAME{
            head, arguments_text = body[:brace], body[brace:]
        name = head.split(CALL_ID)[0].strip()
        return [named_call(name, arguments_text)]

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        if not schemas:
            return ""
        tools = json.dumps(schemas, ensure_ascii=False)
        example = (
            f"{TOOL_CALLS}<tool name>{ARGS}{{<arguments as JSON>}}"
            if self.style == "args"
            else f'{TOOL_CALLS}[{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}]'
        )
        return (
            f"You can call these tools:\n{tools}\n"
            f"To call a tool, write:\n{example}\nThe result comes back in the next message."
        )

    @staticmethod
    def _json(value: object) -> str:
        # "\u005b" is "[" as a JSON escape: a [TOOL_CALLS] inside a string cannot start a call.
        return json.dumps(value, ensure_ascii=False).replace(TOOL_CALLS, "\\u005bTOOL_CALLS]")

    def format_call(self, call: ToolCall) -> str:
        if self.style == "list":
            return self.format_calls([call])
        return f"{TOOL_CALLS}{call.name}{ARGS}{self._json(call.arguments)}"

    def format_calls(self, calls: list[ToolCall]) -> str:
        if self.style == "args":
            return "".join(self.format_call(call) for call in calls)
        return TOOL_CALLS + self._json([{"name": call.name, "arguments": call.arguments} for call in calls])

    def wrap_observation(self, text: str) -> str:
        return text

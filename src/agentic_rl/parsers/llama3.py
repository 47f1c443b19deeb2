"""Llama 3.x JSON tool calls: ``{"name": ..., "parameters": {...}}``, optionally after
``<|python_tag|>``, several separated by ``;`` or newlines; the turn ends with
``<|eom_id|>`` or ``<|eot_id|>``."""

from __future__ import annotations

import json
import re

from agentic_rl.parsers.base import DEFAULT_MAX_ARGUMENT_CHARS, register_parser
from agentic_rl.parsers.calls import BodiesParser, ParsedCall, call_from_object, decode_json, json_value_end
from agentic_rl.types import ToolCall

__all__ = ["Llama3JsonParser", "PYTHON_TAG"]

PYTHON_TAG = "<|python_tag|>"
_CALL_START = re.compile(r'\{\s*"(?:name|parameters|arguments)"\s*:')
_SEPARATORS = " \t\r\n;"


def _skip_separators(text: str, position: int) -> int:
    while position < len(text) and text[position] in _SEPARATORS:
        position += 1
    return position


@register_parser
class Llama3JsonParser(BodiesParser):
    """Llama 3.1/3.2/3.3 JSON calls. The arguments are under ``"parameters"`` (Meta's
    layout) or ``"arguments"``; a call is a JSON object that opens with one of ``"name"``,
    ``"parameters"``, ``"arguments"`` anywhere in the text, or any JSON object right after
    ``<|python_tag|>`` or after another call (``;`` / whitespace between). Text around the
    calls is the content. ``python_tag``: whether :meth:`format_calls` writes the tag.

    Tool output is framed by the chat template (the ``ipython`` turn), so observations
    carry the bare output.
    """

    name = "llama3_json"
    end_tokens = ("<|eom_id|>", "<|eot_id|>")

    def __init__(
        self,
        max_calls_per_turn: int = 4,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
        python_tag: bool = False,
    ) -> None:
        super().__init__(max_calls_per_turn, max_argument_chars)
        self.python_tag = python_tag

    def _split(self, text: str) -> tuple[list[str], list[str], list[str]]:
        bodies: list[str] = []
        outside: list[str] = []
        position, chained = 0, False
        tag = text.find(PYTHON_TAG)
        if tag >= 0:
            outside.append(text[:tag])
            position = _skip_separators(text, tag + len(PYTHON_TAG))
            if not text.startswith("{", position):
                example = '{"name": "<tool name>", "parameters": {<arguments>}}'
                return bodies, outside, [f"after {PYTHON_TAG} write each call as JSON: {example}"]
            chained = True
        while True:
            if chained:
                start = position
            else:
                match = _CALL_START.search(text, position)
                if match is None:
                    outside.append(text[position:])
                    return bodies, outside, []
                start = match.start()
                outside.append(text[position:start])
            end = json_value_end(text, start)
            if end is None:
                return bodies, outside, ["unclosed JSON object in the tool call: close every { with }"]
            bodies.append(text[start:end])
            position = _skip_separators(text, end)
            chained = text.startswith("{", position)

    def _parse_body(self, body: str) -> list[ParsedCall]:
        payload, error = decode_json(body, "the tool call")
        if error:
            return [error]
        return [call_from_object(payload, "a tool call", keys=("parameters", "arguments"))]

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        if not schemas:
            return ""
        tool_lines = "\n\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
        return (
            "You can call these functions:\n\n"
            f"{tool_lines}\n\n"
            'To call one, reply with JSON only: {"name": function name, "parameters": dictionary of '
            "argument name and its value}. Separate several calls with ; and do not use variables."
        )

    def format_call(self, call: ToolCall) -> str:
        return json.dumps({"name": call.name, "parameters": call.arguments}, ensure_ascii=False)

    def format_calls(self, calls: list[ToolCall]) -> str:
        body = "; ".join(self.format_call(call) for call in calls)
        return PYTHON_TAG + body if self.python_tag and body else body

    def wrap_observation(self, text: str) -> str:
        return text

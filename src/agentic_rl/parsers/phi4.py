"""Phi-4-mini tool calls: the plain-text marker ``functools`` and one JSON list,
``functools[{"name": ..., "arguments": {...}}, ...]``.

Layout: Phi-4-mini-instruct's function-calling format (the model card declares the
tools in the system turn between ``<|tool|>`` and ``<|/tool|>``; the call format is the
one Microsoft's function-calling template for vLLM prompts, "prefix function calls with
functools marker (no closing marker required)", and the one vLLM's and SGLang's
``phi4_mini_json`` parsers read). ``functools`` is text, not a special token. Calls the
model writes between ``<|tool_call|>`` and ``<|/tool_call|>`` (the tokenizer's own call
tokens, which evaluations such as BFCL report it emitting) are read too.
"""

from __future__ import annotations

import json

from agentic_rl.parsers.base import register_parser
from agentic_rl.parsers.calls import BodiesParser, ParsedCall, call_from_object, decode_json, json_value_end
from agentic_rl.types import ToolCall

__all__ = ["FUNCTOOLS", "Phi4MiniParser"]

FUNCTOOLS = "functools"
TOOL_CALL, TOOL_CALL_END = "<|tool_call|>", "<|/tool_call|>"
_LAYOUT = f'{FUNCTOOLS}[{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}]'


def _next_marker(text: str, position: int) -> tuple[int, str]:
    """(index, marker) of the first call marker at or after ``position``; (-1, "") for none."""
    found = [(at, marker) for marker in (FUNCTOOLS, TOOL_CALL) if (at := text.find(marker, position)) >= 0]
    return min(found) if found else (-1, "")


@register_parser
class Phi4MiniParser(BodiesParser):
    """``functools[...]`` calls (or ``<|tool_call|>[...]<|/tool_call|>``): a JSON list of
    ``{"name": ..., "arguments": {...}}`` objects (``"parameters"`` is accepted for
    ``"arguments"``; a single object without the list is read as one call). Text before and
    after is the content, and so is the word ``functools`` when no ``[`` or ``{`` follows
    it (Python's module in prose or code); an unclosed list, bad JSON and a
    ``<|tool_call|>`` without JSON are errors. Tool output is framed by the chat template
    (a ``<|tool|>`` turn): observations are bare.
    """

    name = "phi4_mini"
    call_open_tag = FUNCTOOLS
    end_tokens = ("<|end|>", "<|endoftext|>")

    def _split(self, text: str) -> tuple[list[str], list[str], list[str]]:
        bodies: list[str] = []
        outside: list[str] = []
        errors: list[str] = []
        position = search = 0  # outside text runs from position; markers are looked for from search
        while True:
            at, marker = _next_marker(text, search)
            if at < 0:
                outside.append(text[position:])
                return bodies, outside, errors
            start = at + len(marker)
            start += len(text[start:]) - len(text[start:].lstrip())
            if not text.startswith(("[", "{"), start):
                if marker == TOOL_CALL:
                    errors.append(f"after {marker} write the calls as one JSON list: {_LAYOUT}")
                search = start  # the word functools in prose or code is text
                continue
            outside.append(text[position:at])
            end = json_value_end(text, start)
            if end is None:
                errors.append(f"unclosed JSON list after {marker}: close every [ with ] and every {{ with }}")
                return bodies, outside, errors
            bodies.append(text[start:end])
            position = search = end
            if marker == TOOL_CALL and text[end:].lstrip().startswith(TOOL_CALL_END):
                position = search = text.index(TOOL_CALL_END, end) + len(TOOL_CALL_END)

    def _parse_body(self, body: str) -> list[ParsedCall]:
        payload, error = decode_json(body, f"the {FUNCTOOLS} list")
        if error:
            return [error]
        items = payload if isinstance(payload, list) else [payload]
        if not items:
            return [f"the {FUNCTOOLS} list is empty: {_LAYOUT}"]
        keys = ("arguments", "parameters")
        return [call_from_object(item, f"each call in the {FUNCTOOLS} list", keys=keys) for item in items]

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        if not schemas:
            return ""
        tools = json.dumps(schemas, ensure_ascii=False)
        return (
            f"You can call these functions:\n{tools}\n"
            f"To call functions, write {FUNCTOOLS} and then all the calls as one JSON list:\n{_LAYOUT}\n"
            "The results come back in the next message."
        )

    def format_call(self, call: ToolCall) -> str:
        return self.format_calls([call])

    def format_calls(self, calls: list[ToolCall]) -> str:
        listed = [{"name": call.name, "arguments": call.arguments} for call in calls]
        return FUNCTOOLS + json.dumps(listed, ensure_ascii=False)

    def wrap_observation(self, text: str) -> str:
        return text

"""The Qwen3-Coder XML tool-call format::

    <tool_call>
    <function=NAME>
    <parameter=ARG>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are text; with the tools' schemas (``bind_tools``) a value whose parameter is not a
string is read as JSON where it fits the declared type (``5`` for an integer, ``[1, 2]``
for an array), and otherwise kept as text for the tool's validation to report.
"""

from __future__ import annotations

import json
from typing import Any

from agentic_rl.parsers.base import DEFAULT_MAX_ARGUMENT_CHARS, register_parser, scan_tag_blocks
from agentic_rl.parsers.calls import BodiesParser, ParsedCall, checked_name, decode_json
from agentic_rl.types import ToolCall

__all__ = ["Qwen3CoderParser"]

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
_JSON_TYPES: dict[str, Any] = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _tagged(text: str, opener: str, closer: str, position: int) -> tuple[str, str, int] | str | None:
    """The next ``<opener KEY>BODY</closer>`` in ``text`` from ``position``: (key, body,
    end), an error message when it is not closed, None when there is none."""
    start = text.find(opener, position)
    if start < 0:
        return None
    header_end = text.find(">", start)
    if header_end < 0:
        return f"unclosed {opener}...> header: write {opener}NAME>"
    key = text[start + len(opener) : header_end].strip()
    end = text.find(closer, header_end)
    if end < 0:
        return f"unclosed {opener}{key}>: end it with {closer}"
    return key, text[header_end + 1 : end], end + len(closer)


def _stray_text(name: str, text: str) -> str | None:
    """The error for text between a function's parameters (a value that held
    ``</parameter>`` leaves its tail there), else None."""
    text = text.strip()
    if not text:
        return None
    return f"text outside {PARAMETER}...> in '{name}': {text[:60]!r}; put each value in a parameter"


def _properties(schema: dict) -> tuple[str, dict]:
    function = schema.get("function", schema) if isinstance(schema, dict) else {}
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return str(function.get("name", "")), properties if isinstance(properties, dict) else {}


@register_parser
class Qwen3CoderParser(BodiesParser):
    """``<tool_call>`` blocks holding ``<function=NAME>`` with ``<parameter=KEY>`` values
    (one leading and one trailing newline of a value are layout, not value). ``schemas``
    (or :meth:`bind_tools`): the tools' schemas, to read typed values. A value cannot
    contain ``</parameter>``, nor a block ``</function>``. Tool output comes back inside
    ``<tool_response>``, as in Qwen's templates.
    """

    name = "qwen3_coder"
    call_open_tag = OPEN_TAG
    end_tokens = ("<|im_end|>",)

    def __init__(
        self,
        max_calls_per_turn: int = 4,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
        schemas: list[dict] | None = None,
    ) -> None:
        super().__init__(max_calls_per_turn, max_argument_chars)
        self.properties: dict[str, dict] = {}
        self.bind_tools(schemas or [])

    def bind_tools(self, schemas: list[dict]) -> None:
        self.properties = dict(_properties(schema) for schema in schemas)

    def _split(self, text: str) -> tuple[list[str], list[str], list[str]]:
        return scan_tag_blocks(text, OPEN_TAG, CLOSE_TAG, unclosed_hint=f"end each call with {CLOSE_TAG}")

    def _parse_body(self, body: str) -> list[ParsedCall]:
        calls: list[ParsedCall] = []
        position = 0
        while (found := _tagged(body, FUNCTION, FUNCTION_END, position)) is not None:
            if isinstance(found, str):
                return [*calls, found]
            name, inner, position = found
            calls.append(self._function(name, inner))
        return calls or [f"{OPEN_TAG} must hold {FUNCTION}NAME> ... {FUNCTION_END}"]

    def _function(self, name: str, inner: str) -> ParsedCall:
        error = checked_name(name)
        if error:
            return error
        arguments: dict[str, Any] = {}
        position = 0
        while (found := _tagged(inner, PARAMETER, PARAMETER_END, position)) is not None:
            if isinstance(found, str):
                return f"{found} (in '{name}')"
            stray = _stray_text(name, inner[position : inner.find(PARAMETER, position)])
            if stray:
                return stray
            key, value, position = found
            if not key:
                return f"a parameter of '{name}' has no name: write {PARAMETER}NAME>"
            if key in arguments:
                return f"parameter '{key}' of '{name}' is given twice"
            value = value[1:] if value.startswith("\n") else value
            value = value[:-1] if value.endswith("\n") else value
            arguments[key] = self._value(name, key, value)
        return _stray_text(name, inner[position:]) or (name, arguments)

    def _value(self, tool: str, key: str, text: str) -> Any:
        """``text`` read per the parameter's declared type(s); text when a string is
        allowed, the type is unknown, or it does not fit."""
        schema = self.properties.get(tool, {}).get(key)
        declared = schema.get("type") if isinstance(schema, dict) else None
        types = [declared] if isinstance(declared, str) else list(declared or [])
        if not types or "string" in types:
            return text
        value, error = decode_json(text.strip(), "a parameter")
        if error is None and any(_JSON_TYPES.get(kind, lambda _: False)(value) for kind in types):
            return value
        return text

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        if not schemas:
            return ""
        example = "\n".join(
            [OPEN_TAG, f"{FUNCTION}example_function_name>", f"{PARAMETER}example_parameter>", "value"]
            + [PARAMETER_END, FUNCTION_END, CLOSE_TAG]
        )
        return (
            "# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
            + "\n".join(_describe(schema) for schema in schemas)
            + f"\n</tools>\n\nTo call a function, reply in this format:\n{example}\n"
            "A value may span several lines. The result comes back inside <tool_response></tool_response>."
        )

    def format_call(self, call: ToolCall) -> str:
        lines = [OPEN_TAG, f"{FUNCTION}{call.name}>"]
        for key, value in call.arguments.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines += [f"{PARAMETER}{key}>", text, PARAMETER_END]
        return "\n".join([*lines, FUNCTION_END, CLOSE_TAG])


def _describe(schema: dict) -> str:
    """One tool in the XML layout of Qwen3-Coder's tool list."""
    function = schema.get("function", schema)
    lines = ["<function>", f"<name>{function.get('name', '')}</name>"]
    if function.get("description"):
        lines.append(f"<description>{function['description']}</description>")
    lines.append("<parameters>")
    parameters = function.get("parameters") or {}
    for key, spec in (parameters.get("properties") or {}).items():
        lines += ["<parameter>", f"<name>{key}</name>"]
        if isinstance(spec, dict) and "type" in spec:
            kind = spec["type"]
            lines.append(f"<type>{kind if isinstance(kind, str) else json.dumps(kind)}</type>")
        if isinstance(spec, dict) and spec.get("description"):
            lines.append(f"<description>{spec['description']}</description>")
        lines.append("</parameter>")
    if parameters.get("required"):
        lines.append(f"<required>{json.dumps(parameters['required'])}</required>")
    return "\n".join([*lines, "</parameters>", "</function>"])

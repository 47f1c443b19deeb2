"""DeepSeek-V3 / R1 tool-call tokens (full-width bars U+FF5C, ``▁`` U+2581)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {"arg": ...}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME2
    ```json
    {...}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>

V3.1's shorter call, ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``, is
read too.
"""

from __future__ import annotations

import json

from agentic_rl.parsers.base import register_parser, scan_tag_blocks
from agentic_rl.parsers.calls import BodiesParser, ParsedCall, checked_name, named_call
from agentic_rl.types import ToolCall

__all__ = ["CALLS_BEGIN", "DeepSeekParser"]

CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
SEP = "<\uff5ctool\u2581sep\uff5c>"
END_OF_SENTENCE = "<\uff5cend\u2581of\u2581sentence\uff5c>"
FENCE = "```"
_LAYOUT = f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}NAME\n{FENCE}json\n{{arguments}}\n{FENCE}{CALL_END}{CALLS_END}"


def _unfenced(text: str) -> str | None:
    """The JSON inside a ```json fence (or bare JSON); None when a fence is not closed."""
    text = text.strip()
    if not text.startswith(FENCE):
        return text
    body = text.partition("\n")[2].rstrip()
    return body[: -len(FENCE)] if body.endswith(FENCE) else None


@register_parser
class DeepSeekParser(BodiesParser):
    """Calls inside ``<｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>`` sections; text before
    and after is the content (R1's reasoning included). An unclosed section or call, a
    call token outside a section, a missing ``<｜tool▁sep｜>``, an unclosed fence and bad
    JSON are errors. Tool output is framed by the chat template
    (``<｜tool▁output▁begin｜>``...): observations are bare.
    """

    name = "deepseek_v3"
    call_open_tag = CALLS_BEGIN
    end_tokens = (END_OF_SENTENCE,)

    def _split(self, text: str) -> tuple[list[str], list[str], list[str]]:
        sections, outside, errors = scan_tag_blocks(
            text, CALLS_BEGIN, CALLS_END, unclosed_hint=f"end the calls with {CALLS_END}"
        )
        if any(CALL_BEGIN in piece for piece in outside):
            errors.append(f"found {CALL_BEGIN} outside {CALLS_BEGIN}...{CALLS_END}: write {_LAYOUT}")
            outside = [piece.replace(CALL_BEGIN, "") for piece in outside]
        bodies: list[str] = []
        for section in sections:
            calls, between, call_errors = scan_tag_blocks(
                section, CALL_BEGIN, CALL_END, unclosed_hint=f"end each call with {CALL_END}"
            )
            bodies += calls
            outside += between
            errors += call_errors
        return bodies, outside, errors

    def _parse_body(self, body: str) -> list[ParsedCall]:
        kind, found, rest = body.partition(SEP)
        if not found:
            return [f"a tool call needs {SEP} between its type and the tool name: write {_LAYOUT}"]
        if kind.strip() == "function":  # V3 / R1: NAME, newline, fenced JSON
            name, _, arguments_text = rest.partition("\n")
            unfenced = _unfenced(arguments_text)
        else:  # V3.1: NAME<sep>JSON
            name, unfenced = kind, _unfenced(rest)
        name = name.strip()
        error = checked_name(name)
        if error:
            return [error]
        if unfenced is None:
            return [f"unclosed {FENCE} fence in the call of '{name}': end the JSON with {FENCE}"]
        return [named_call(name, unfenced)]

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        if not schemas:
            return ""
        tools = []
        for schema in schemas:
            function = schema.get("function", schema)
            parameters = json.dumps(function.get("parameters") or {}, ensure_ascii=False)
            tools.append(
                f"### {function.get('name', '')}\nDescription: {function.get('description', '')}\n\nParameters: {parameters}"
            )
        return (
            "## Tools\nYou can call these tools:\n\n" + "\n\n".join(tools) + f"\n\nTo call tools, write:\n{_LAYOUT}\n"
            f"Several calls go one after another (a newline between) inside one {CALLS_BEGIN}...{CALLS_END}."
        )

    @staticmethod
    def _call_text(call: ToolCall) -> str:
        # "\uff5c" as a JSON escape: a string argument cannot end the call or the section early.
        arguments = json.dumps(call.arguments, ensure_ascii=False).replace("<\uff5c", "<\\uff5c")
        return f"{CALL_BEGIN}function{SEP}{call.name}\n{FENCE}json\n{arguments}\n{FENCE}{CALL_END}"

    def format_call(self, call: ToolCall) -> str:
        return self.format_calls([call])

    def format_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        return CALLS_BEGIN + "\n".join(self._call_text(call) for call in calls) + CALLS_END

    def wrap_observation(self, text: str) -> str:
        return text

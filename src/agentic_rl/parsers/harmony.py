"""OpenAI harmony (gpt-oss) tool calls: an assistant message whose header names a
recipient, ``to=functions.NAME``, with the JSON arguments as its content::

    <|channel|>analysis<|message|>Need the calculator.<|end|><|start|>assistant<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{"expression": "2+3"}<|call|>

Layout: OpenAI's harmony response format guide (openai/harmony ``docs/format.md``). A
turn as sampled after the generation prompt ``<|start|>assistant`` is one or more
messages, ``{header}<|message|>{content}`` ended by ``<|end|>`` (more follow, each opened
by ``<|start|>assistant``), ``<|call|>`` (a tool call: sampling stops) or ``<|return|>``
(the final answer: sampling stops). The recipient may stand in the role part of the
header (``assistant to=functions.NAME<|channel|>commentary json``) or after the channel.
"""

from __future__ import annotations

import json
import re

from agentic_rl.parsers.base import register_parser
from agentic_rl.parsers.calls import BodiesParser, ParsedCall, named_call
from agentic_rl.types import ToolCall

__all__ = ["HarmonyParser"]

START, END, MESSAGE, CHANNEL = "<|start|>", "<|end|>", "<|message|>", "<|channel|>"
CALL, RETURN, CONSTRAIN = "<|call|>", "<|return|>", "<|constrain|>"
NAMESPACE = "functions."
_RECIPIENT = re.compile(r"(?:^|\s)to=(\S*?)(?=\s|<\||$)")
_ROLE = "assistant"
_LAYOUT = f"{CHANNEL}commentary to={NAMESPACE}NAME {CONSTRAIN}json{MESSAGE}{{JSON arguments}}{CALL}"


def _messages(text: str) -> tuple[list[str], list[str]]:
    """(the turn's messages: header, ``<|message|>``, content, each without its
    terminator; text after a terminator that opens no new message)."""
    messages, stray = [], []
    for index, piece in enumerate(text.split(START)):
        if index and piece.startswith(_ROLE):
            piece = piece[len(_ROLE) :]
        ends = [at for at in (piece.find(t) for t in (END, CALL, RETURN)) if at >= 0]
        if ends:
            terminator_end = piece.index(">", min(ends)) + 1
            stray.append(piece[terminator_end:])
            piece = piece[: min(ends)]
        messages.append(piece)
    return messages, stray


def _recipient(header: str) -> str | None:
    match = _RECIPIENT.search(header)
    return match.group(1) if match else None


@register_parser
class HarmonyParser(BodiesParser):
    """Calls are the turn's messages addressed ``to=functions.NAME``; the content of every
    other message (analysis, commentary preambles, final) is the content, in order. A
    recipient outside ``functions`` (the built-in ``browser``/``python`` tools), a call
    without ``<|message|>``, bad JSON and arguments that are not an object are errors.
    Tool output is framed by the chat template (a ``functions.NAME to=assistant`` message):
    observations are bare. One call per turn is what the model samples (``<|call|>``
    stops it); :meth:`format_calls` writes several as consecutive messages.
    """

    name = "harmony"
    call_open_tag = None  # a call's header opens like any other message: a stream holds the whole turn
    end_tokens = (CALL, RETURN, END)

    def _split(self, text: str) -> tuple[list[str], list[str], list[str]]:
        bodies: list[str] = []
        errors: list[str] = []
        messages, outside = _messages(text)
        for message in messages:
            header, found, content = message.partition(MESSAGE)
            if _recipient(header) is None:
                outside.append(content if found else header)  # no header at all: text outside the layout
            elif found:
                bodies.append(message)
            else:
                errors.append(f"a tool call needs {MESSAGE} between its header and the arguments: {_LAYOUT}")
        return bodies, outside, errors

    def _parse_body(self, body: str) -> list[ParsedCall]:
        header, _, content = body.partition(MESSAGE)
        recipient = _recipient(header) or ""
        if not recipient.startswith(NAMESPACE):
            return [f"call functions as to={NAMESPACE}NAME (got to={recipient[:60]}): {_LAYOUT}"]
        name = recipient[len(NAMESPACE) :]
        return [named_call(name, content)]

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        if not schemas:
            return ""
        tools = json.dumps(schemas, ensure_ascii=False)
        return (
            f"You can call these functions:\n{tools}\n"
            f"To call one, write a commentary message to it:\n{_LAYOUT}\n"
            "The result comes back in the next message."
        )

    @staticmethod
    def _json(value: object) -> str:
        # "\u003c" is "<" as a JSON escape: a special-token string inside a value cannot end the message.
        return json.dumps(value, ensure_ascii=False).replace("<|", "\\u003c|")

    def format_call(self, call: ToolCall) -> str:
        return f"{CHANNEL}commentary to={NAMESPACE}{call.name} {CONSTRAIN}json{MESSAGE}{self._json(call.arguments)}"

    def format_calls(self, calls: list[ToolCall]) -> str:
        return f"{CALL}{START}{_ROLE}".join(self.format_call(call) for call in calls)

    def wrap_observation(self, text: str) -> str:
        return text

"""Text-form messages (as envs exchange them, calls written in a tool-call format) and
OpenAI messages (structured ``tool_calls``, bare ``tool`` results): the conversion both
ways for one format, used by stored data, the OpenAI-compatible engine and the gateway."""

from __future__ import annotations

import json

from agentic_rl.parsers.base import ToolCallParser, get_parser
from agentic_rl.types import Message, ToolCall

__all__ = ["as_parser", "assistant_text", "openai_messages", "unwrap_observation"]


def as_parser(parser: ToolCallParser | str) -> ToolCallParser:
    """A parser, or the registered one of that name."""
    return get_parser(parser) if isinstance(parser, str) else parser


def unwrap_observation(text: str, parser: ToolCallParser | str) -> str:
    """Reverse ``parser.wrap_observation`` (hermes: strip "<tool_response>\\n" and
    "\\n</tool_response>"); raises if ``text`` is not wrapped that way, since re-wrapping
    an unwrapped text would not reproduce the tokens the model saw."""
    return as_parser(parser).unwrap_observation(text)


def assistant_text(content: str, calls: list[ToolCall], parser: ToolCallParser | str) -> str:
    """The text a model writes for an assistant turn: content, then one block per call."""
    parser = as_parser(parser)
    blocks = parser.format_calls(calls) if calls else ""
    return content + ("\n" if content and blocks else "") + blocks


def _assistant_message(text: str, parser: ToolCallParser, exact: bool) -> tuple[Message, list[str]]:
    """The OpenAI assistant message for sampled ``text`` and the ids of its structured calls."""
    parsed = parser.parse(text)
    # Malformed blocks would vanish from the content (and the error observations that
    # follow would make no sense), so such turns stay raw text; with ``exact``, so do turns
    # whose text is not exactly the canonical rendering of their calls.
    if parsed.errors or not parsed.calls or (exact and assistant_text(parsed.content, parsed.calls, parser) != text):
        return {"role": "assistant", "content": text}, []
    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
        }
        for call in parsed.calls
    ]
    return {"role": "assistant", "content": parsed.content, "tool_calls": calls}, [c["id"] for c in calls]


def openai_messages(
    messages: list[Message], parser: ToolCallParser | str, *, exact: bool = True, framed: bool = False
) -> list[Message]:
    """Text-form messages (as an env exchanges them) as OpenAI messages: an assistant turn's
    well-formed calls become ``tool_calls`` (``exact``: only where that keeps its text, see
    ``trajectory_to_example``), tool results are unwrapped (``framed``: they are bare
    already, the chat template framed them) and tied to those calls' ids in order."""
    parser = as_parser(parser)
    out: list[Message] = []
    pending: list[str] = []  # ids of the last assistant turn's calls, matched to results in order
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            converted, pending = _assistant_message(message.get("content") or "", parser, exact)
            out.append(converted)
        elif role == "tool":
            converted = {"role": "tool"}
            if pending:
                converted["tool_call_id"] = pending.pop(0)
            if message.get("name"):
                converted["name"] = message["name"]
            content = message.get("content") or ""
            converted["content"] = content if framed else unwrap_observation(content, parser)
            out.append(converted)
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out

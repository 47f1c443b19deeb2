"""OpenAI chat messages <-> the model's own tool-call text, through the project's parser.

Requests carry OpenAI-format history: assistant messages with ``tool_calls``, ``tool``
messages with ``tool_call_id``, ``tools`` as function schemas, content as a string or a
list of text parts. The model reads and writes its parser's format (hermes by default):
the tools are described in the system prompt (``format_tools_prompt``; by the chat
template itself where it renders tools, ``ChatRenderer.render_tools``), earlier calls are
written back as the model would write them (``assistant_text``: the format's own layout of a turn's calls), tool results are framed as
observations (``format_result``). A reply is parsed back into OpenAI ``tool_calls``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from agentic_rl.parsers.base import ToolCallParser
from agentic_rl.parsers.messages import assistant_text
from agentic_rl.types import Message, ToolCall, ToolResult


class RequestError(ValueError):
    """A request the gateway cannot serve: a 4xx (400 unless ``status`` says otherwise) naming the field."""

    def __init__(self, message: str, param: str | None = None, *, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


def content_text(content: Any, where: str) -> str:
    """A message's content (a string or a list of text parts) as one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.content: only text parts are supported", where)
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}.content: expected a string or a list of text parts", where)


def _optional_string(message: dict, name: str, where: str) -> str:
    value = message.get(name)
    if value is not None and not isinstance(value, str):
        raise RequestError(f"{where}.{name}: expected a string", where)
    return value or ""


def _tool_calls(calls: Any, where: str) -> list[ToolCall]:
    """An assistant message's OpenAI ``tool_calls`` as ToolCalls (a RequestError names the bad shape)."""
    if calls is None:
        return []
    expected = (
        f"{where}.tool_calls: expected [{{id, type: function, function: {{name, arguments: JSON object string}}}}]"
    )
    if not isinstance(calls, list):
        raise RequestError(expected, where)
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(expected, where)
        call_id, arguments = call.get("id", ""), function.get("arguments") or "{}"
        if not isinstance(call_id, str) or not isinstance(arguments, str):
            raise RequestError(expected, where)
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            raise RequestError(expected, where) from None
        if not isinstance(parsed, dict):
            raise RequestError(expected, where)
        out.append(ToolCall(function["name"], parsed, call_id))
    return out


def tool_schemas(tools: Any) -> list[dict]:
    """The function schemas of an OpenAI ``tools`` list."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("tools: expected a list of {type: function, function: {...}}", "tools")
    schemas = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or tool.get("type", "function") != "function"
        ):
            raise RequestError(
                f"tools[{i}]: expected {{type: function, function: {{name, description, parameters}}}}", "tools"
            )
        schemas.append(function)
    return schemas


def to_model_messages(
    messages: Any, schemas: list[dict], parser: ToolCallParser, *, describe_tools: bool = True, framed: bool = False
) -> list[Message]:
    """OpenAI request ``messages`` -> the messages the chat template renders (tools in the
    system prompt unless ``describe_tools`` is False (the template describes them), earlier
    calls and results in the parser's text format; ``framed``: results bare, the template
    frames them)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: expected a non-empty list", "messages")
    out: list[Message] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
        ):
            raise RequestError(f"{where}.role: expected system, developer, user, assistant or tool", where)
        role = "system" if message["role"] == "developer" else message["role"]
        text = content_text(message.get("content"), where)
        if role == "assistant":
            calls = _tool_calls(message.get("tool_calls"), where)
            call_names.update((call.id, call.name) for call in calls)
            out.append({"role": "assistant", "content": assistant_text(text, calls, parser)})
        elif role == "tool":
            call_id = _optional_string(message, "tool_call_id", where)
            name = _optional_string(message, "name", where) or call_names.get(call_id, "tool")
            out.append(parser.format_result(ToolResult(name=name, content=text, call_id=call_id), framed=framed))
        else:
            out.append({"role": role, "content": text})
    return parser.with_tools_prompt(out, schemas) if describe_tools else out


def reply_message(text: str, parser: ToolCallParser | None) -> tuple[dict[str, Any], bool]:
    """The OpenAI assistant message for a reply's ``text`` (tool calls parsed when the
    request offered tools) and whether it calls tools.

    With calls, the content is the text before the first call (trailing whitespace
    dropped, leading kept) then, on a new line, the text between and after the calls: a
    stream can send the text before the call as it is sampled and still add up to this."""
    if parser is not None:
        parsed = parser.parse(text)
        if parsed.calls:
            calls = [
                {
                    "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
                }
                for call in parsed.calls
            ]
            cut = text.find(parser.call_open_tag) if parser.call_open_tag else -1
            if cut >= 0:
                content = "\n".join(part for part in (text[:cut].rstrip(), parser.parse(text[cut:]).content) if part)
            else:
                content = parsed.content
            return {"role": "assistant", "content": content or None, "tool_calls": calls}, True
    return {"role": "assistant", "content": text}, False

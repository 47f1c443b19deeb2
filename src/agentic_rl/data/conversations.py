"""OpenAI-format conversations with tool calls, to and from tokens.

Stored SFT data is portable OpenAI chat format (structured ``tool_calls``, raw ``tool``
results; ``tools`` beside ``messages`` when a chat template described the tools, as in
OpenAI's fine-tuning files). ``render_example`` turns it back into tokens exactly the way the rollout engine
builds a trajectory (prompt, sampled turns, observations rendered once), so supervised
training sees the same token layout the model sees at inference.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentic_rl.chat import ChatRenderer
from agentic_rl.parsers import ToolCallParser
from agentic_rl.parsers.messages import as_parser, assistant_text, openai_messages
from agentic_rl.types import Message, ToolCall, ToolResult, Trajectory, openai_tools

ROLES = ("system", "user", "assistant", "tool")


# --- JSONL -------------------------------------------------------------------------


def read_jsonl(path: str | Path) -> list[dict]:
    """One JSON object per line (blank lines skipped); errors name the file and line."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: invalid JSON: {error.msg} (column {error.colno})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    """Write rows atomically: a temp file in the same folder, then rename (never half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# --- trajectory -> stored example ------------------------------------------------


def trajectory_to_example(
    trajectory: Trajectory, parser: ToolCallParser | str, *, skip_messages: int = 0, exact: bool = True
) -> dict[str, Any]:
    """A stored SFT example ``{"messages": [...], "metadata": {...}}`` from a trajectory.

    ``skip_messages`` messages right after the system message (the few-shot
    demonstrations) are dropped. Assistant messages in the prompt of a segment (a context
    policy's window or summary context: ``info["prompt_messages"]``) get ``"weight": 0``,
    OpenAI's fine-tuning mark for a turn shown but not trained. ``exact`` (default) keeps an assistant turn as raw text
    (no ``tool_calls``) when structuring it would change its text, so ``render_example``
    always reproduces what the model wrote; ``exact=False`` always structures well-formed
    calls (canonicalizing their formatting).
    """
    parser = as_parser(parser)
    messages = list(trajectory.messages)
    out = openai_messages(messages, parser, exact=exact, framed="tool_output_template" in trajectory.info)
    # A segment that a context policy started shows earlier turns as its prompt: they were
    # sampled (and are trained) in the segment before, so here they carry weight 0.
    for i in range(min(int(trajectory.info.get("prompt_messages", 0)), len(out))):
        if out[i]["role"] == "assistant":
            out[i]["weight"] = 0
    start = 1 if out and out[0].get("role") == "system" else 0
    out = out[:start] + out[start + skip_messages :]
    metadata = {
        "task_id": trajectory.task_id,
        "reward": trajectory.reward,
        "correct": trajectory.correct,
        "answer": trajectory.answer,
        "num_turns": trajectory.num_turns,
        "termination_reason": trajectory.termination_reason,
    }
    example: dict[str, Any] = {"messages": out, "metadata": metadata}
    if trajectory.template_tools:  # the chat template described them: the messages do not
        example["tools"] = openai_tools(trajectory.template_tools)
    return example


# --- validation ------------------------------------------------------------------


def validate_example(example: Any, index: int | None = None) -> None:
    """Raise ``ValueError`` with one line naming the example and field that is wrong."""
    where = "example" if index is None else f"example {index}"
    if not isinstance(example, dict) or "messages" not in example:
        raise ValueError(f"{where}: missing 'messages'")
    messages = example["messages"]
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: 'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        field = f"{where}: messages[{i}]"
        if not isinstance(message, dict):
            raise ValueError(f"{field}: expected an object, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"{field}.role: unknown role {role!r}; expected one of {', '.join(ROLES)}")
        content = message.get("content")
        if role == "tool" and not isinstance(content, str):
            raise ValueError(f"{field}.content: a tool message needs string content")
        if not isinstance(content, str) and not (role == "assistant" and content is None):
            raise ValueError(f"{field}.content: expected a string, got {type(content).__name__}")
        if "weight" in message and (
            role != "assistant" or message["weight"] not in (0, 1) or isinstance(message["weight"], bool)
        ):
            raise ValueError(
                f"{field}.weight: expected 0 or 1 on an assistant message, got {message['weight']!r} on a {role} message"
            )
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls is not None and not isinstance(calls, list):
            raise ValueError(f"{field}.tool_calls: expected a list, got {type(calls).__name__}")
        for j, call in enumerate(calls or []):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                raise ValueError(f"{field}.tool_calls[{j}].function.name: missing or not a string")
            try:
                _call_arguments(function.get("arguments", {}))
            except ValueError as error:
                raise ValueError(f"{field}.tool_calls[{j}].function.arguments: {error}") from None
    if not any(m["role"] == "assistant" and m.get("weight", 1) == 1 for m in messages):
        raise ValueError(f"{where}: no assistant message with weight 1 (nothing to train on)")
    try:
        example_tools(example.get("tools"))
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def example_tools(tools: Any) -> list[dict]:
    """An example's ``tools``, checked: OpenAI's ``[{"type": "function", "function": {name,
    ...}}]`` (None: none)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ValueError(f"tools: expected a list, got {type(tools).__name__}")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or tool.get("type") != "function"
        ):
            raise ValueError(f"tools[{i}]: expected {{type: function, function: {{name, description, parameters}}}}")
    return list(tools)


def _call_arguments(arguments: Any) -> dict[str, Any]:
    """Arguments as a dict: OpenAI stores a JSON string; an already-decoded object is accepted."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            raise ValueError(f"not valid JSON ({error.msg})") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"expected a JSON object, got {type(arguments).__name__}")
    return arguments


# --- stored example -> tokens ----------------------------------------------------


def _text_message(message: Message, parser: ToolCallParser, framed: bool = False) -> Message:
    """A stored message as the text-only message the env would have produced (``framed``:
    tool output left bare for the chat template to frame)."""
    if message["role"] == "tool":
        return parser.format_result(
            ToolResult(name=message.get("name") or "", content=message["content"]), framed=framed
        )
    if message["role"] == "assistant":
        calls = [
            ToolCall(
                name=c["function"]["name"],
                arguments=_call_arguments(c["function"].get("arguments", {})),
                id=c.get("id", ""),
            )
            for c in message.get("tool_calls") or []
        ]
        return {"role": "assistant", "content": assistant_text(message.get("content") or "", calls, parser)}
    return {"role": message["role"], "content": message.get("content") or ""}


def text_messages(messages: list[Message], parser: ToolCallParser | str) -> list[Message]:
    """Stored OpenAI messages as the text-only messages an env exchanges (calls written and
    results wrapped by ``parser``), e.g. to show converted conversations as demonstrations."""
    parser = as_parser(parser)
    return [_text_message(m, parser) for m in messages]


def render_example(
    messages: list[Message], renderer: ChatRenderer, parser: ToolCallParser | str, tools: list[dict] | None = None
) -> tuple[list[int], list[int]]:
    """Token ids and loss mask (1 on assistant content + end-of-turn token), built exactly
    as the rollout engine builds a trajectory. Messages after the last assistant turn carry
    no loss and are dropped. An assistant message with ``"weight": 0`` carries no loss;
    everything before the first trained one is the prompt, rendered in one piece as a
    context policy's segment prompt is. ``tools`` (an example's ``tools``): described by
    the chat template where it renders tools for this format, else in the system message
    as ``ToolEnv`` writes them."""
    parser = as_parser(parser)
    validate_example({"messages": messages, "tools": tools})
    offered = example_tools(tools)
    in_template = bool(offered) and renderer.render_tools(parser)
    # As ToolEnv does: where the template describes the tools and frames their output as the parser would, results go bare.
    texts = [_text_message(m, parser, framed=in_template and renderer.frames_tool_output(parser)) for m in messages]
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("weight", 1) == 1)
    assistant_at = [i for i, m in enumerate(texts) if m["role"] == "assistant" and i >= first]
    opening = texts[:first]
    if in_template:
        ids = renderer.prompt_ids(opening, tools=offered)
    else:
        ids = renderer.prompt_ids(parser.with_tools_prompt(opening, offered))
    mask = [0] * len(ids)
    for i, next_i in zip(assistant_at, assistant_at[1:] + [None]):
        turn = renderer.encode_untrusted(texts[i]["content"]) + [renderer.end_of_turn_id(texts[i]["content"])]
        ids += turn
        mask += [messages[i].get("weight", 1)] * len(turn)
        if next_i is not None:
            observation = renderer.observation_ids(texts[i + 1 : next_i], stopped=True)
            ids += observation
            mask += [0] * len(observation)
    return ids, mask

"""The tool-call parser interface and the parser registry.

A parser owns one text format end to end: how the tools are described in the system
prompt, how a call is written (for demos and SFT data), how calls are read back out of
the model's text, and how results are shown to the model.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from agentic_rl.types import TOOL_OUTPUT_PROBE, Message, ToolCall, ToolResult

__all__ = [
    "AUTO",
    "DEFAULT_MAX_ARGUMENT_CHARS",
    "ParseResult",
    "ToolCallParser",
    "PARSERS",
    "get_parser",
    "register_parser",
]

DEFAULT_MAX_ARGUMENT_CHARS = 32_768
"""Default cap on the text of one tool call (its JSON body, code or query): a longer call
is reported as malformed and never parsed further or run, so one turn cannot make the
trainer process decode megabytes of JSON or ship them to a tool."""


@dataclass
class ParseResult:
    """Tool calls found in one assistant message."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """One message per malformed call; those calls are not executed."""
    content: str = ""
    """The text with the tool-call blocks removed, stripped."""

    @property
    def has_calls(self) -> bool:
        """True when the model tried to call a tool (even if every attempt was malformed)."""
        return bool(self.calls or self.errors)


class ToolCallParser(abc.ABC):
    """One tool-call text format. Subclasses set ``name`` and implement the abstract methods."""

    name: ClassVar[str] = ""
    call_open_tag: ClassVar[str | None] = None
    """The text that opens a call (hermes: ``<tool_call>``): a stream holds text back from
    there until the turn is parsed. None: unknown (a stream holds the whole turn)."""
    template_tools: ClassVar[bool] = False
    """Whether a chat template's own tool description fits this format (JSON function
    calls): then a template that renders ``tools`` describes them (``ChatRenderer``),
    instead of ``format_tools_prompt`` in the system message. Tag formats (``<search>``,
    ``<code>``) describe themselves."""

    @abc.abstractmethod
    def parse(self, text: str) -> ParseResult:
        """Extract the tool calls from an assistant message."""

    @abc.abstractmethod
    def format_tools_prompt(self, schemas: list[dict]) -> str:
        """The system-prompt section listing the tools and how to call them."""

    @abc.abstractmethod
    def format_call(self, call: ToolCall) -> str:
        """The exact text a model writes for ``call``; ``parse`` must read it back."""

    def format_calls(self, calls: list[ToolCall]) -> str:
        """The text of one turn's calls: one :meth:`format_call` block each, a newline
        between. Formats that write a turn's calls as one unit (DeepSeek's section,
        Mistral's JSON list, Llama's ``;`` list) override it; ``parse`` must read it back."""
        return "\n".join(self.format_call(call) for call in calls)

    def bind_tools(self, schemas: list[dict]) -> None:
        """Learn the offered tools' schemas (OpenAI form or bare functions). Formats whose
        arguments are untyped text (Qwen3-Coder's ``<parameter=...>``) read values by
        them; the others ignore this."""
        return None

    def with_tools_prompt(self, messages: list[Message], schemas: list[dict]) -> list[Message]:
        """``messages`` with the tools described in the system message (``ToolEnv``'s layout:
        the system text, a blank line, the tools prompt; a system message of its own when
        there is none)."""
        prompt = self.format_tools_prompt(schemas) if schemas else ""
        if not prompt:
            return list(messages)
        if messages and messages[0].get("role") == "system":
            system = "\n\n".join(part for part in (messages[0].get("content") or "", prompt) if part)
            return [{**messages[0], "content": system}, *messages[1:]]
        return [{"role": "system", "content": prompt}, *messages]

    def wrap_observation(self, text: str) -> str:
        """How tool output is framed for the model (override per format)."""
        return f"<tool_response>\n{text}\n</tool_response>"

    def unwrap_observation(self, text: str) -> str:
        """Reverse :meth:`wrap_observation`; raises ValueError when ``text`` is not framed
        that way (re-framing unframed text would not give the tokens the model saw)."""
        prefix, suffix = self.wrap_observation(TOOL_OUTPUT_PROBE).split(TOOL_OUTPUT_PROBE)
        if not (text.startswith(prefix) and text.endswith(suffix) and len(text) >= len(prefix) + len(suffix)):
            raise ValueError(f"tool observation is not wrapped as {prefix!r}...{suffix!r}: {text[:60]!r}")
        return text[len(prefix) : len(text) - len(suffix)]

    def framed_by(self, tool_output_template: str | None) -> bool:
        """Whether a chat template that renders a tool message as ``tool_output_template``
        (``ChatRenderer.tool_output_template``: the message's content is
        :data:`TOOL_OUTPUT_PROBE`) frames tool output exactly as :meth:`wrap_observation`
        does (Qwen's and Hermes' templates write ``<tool_response>`` themselves). Then tool
        messages carry the bare output (``framed=True``): framing it here too would show
        the model a double frame it never sees in the model's own format."""
        return bool(tool_output_template) and self.wrap_observation(TOOL_OUTPUT_PROBE) in tool_output_template

    def format_result(self, result: ToolResult, *, framed: bool = False) -> Message:
        """The observation message for one tool result (``framed``: the chat template frames
        it, see :meth:`framed_by`)."""
        return {
            "role": "tool",
            "name": result.name,
            "content": result.content if framed else self.wrap_observation(result.content),
        }

    def format_error(self, error: str, *, framed: bool = False) -> Message:
        """The observation message for a call that could not be parsed."""
        return {"role": "tool", "content": f"Error: {error}" if framed else self.wrap_observation(f"Error: {error}")}


PARSERS: dict[str, type[ToolCallParser]] = {}
"""Parser classes by name (filled by :func:`register_parser`)."""

ParserT = TypeVar("ParserT", bound=type[ToolCallParser])


def register_parser(cls: ParserT) -> ParserT:
    """Class decorator adding a parser to :data:`PARSERS` under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} must set a non-empty class attribute 'name'")
    if cls.name in PARSERS and PARSERS[cls.name] is not cls:
        raise ValueError(f"a parser named '{cls.name}' is already registered")
    PARSERS[cls.name] = cls
    return cls


AUTO = "auto"
"""The ``parser`` setting that picks the format from the model's chat template
(:func:`agentic_rl.parsers.auto.detect_parser`); resolved to a registered name before
any parser is built."""


def get_parser(name: str, **kwargs: Any) -> ToolCallParser:
    """Build the parser registered under ``name``; KeyError lists the known names
    (ValueError for ``auto``: it must be resolved from a model's template first)."""
    if name == AUTO:
        raise ValueError(
            "parser: 'auto' picks the format from the model's chat template and was not resolved here "
            f"(no model known); set one of: {', '.join(sorted(PARSERS))}"
        )
    if name not in PARSERS:
        raise KeyError(f"unknown parser '{name}'; available parsers: {', '.join(sorted(PARSERS))}")
    return PARSERS[name](**kwargs)


def check_max_argument_chars(value: int) -> int:
    """Validate a ``max_argument_chars`` constructor argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_argument_chars must be a positive int, got {value!r}")
    return value


def argument_size_error(size: int, limit: int) -> str | None:
    """The error for a call whose text is over ``limit`` characters, else None."""
    if size <= limit:
        return None
    return f"tool call is {size} characters long; at most {limit} are allowed, so it was not run"


def scan_tag_blocks(
    text: str, open_tag: str, close_tag: str, *, unclosed_hint: str
) -> tuple[list[str], list[str], list[str]]:
    """Split ``text`` at ``open_tag ... close_tag`` blocks -> (bodies, outside, errors).

    ``bodies`` are the raw block contents in order, ``outside`` the text between blocks
    (stray close tags removed), ``errors`` a stray close tag or an unclosed block (the
    scan stops there; ``unclosed_hint`` tells the model how to end the block).
    """
    errors: list[str] = []
    outside: list[str] = []
    bodies: list[str] = []
    position = 0
    while True:
        start = text.find(open_tag, position)
        segment = text[position:] if start < 0 else text[position:start]
        if close_tag in segment:
            errors.append(f"found {close_tag} without a matching {open_tag}")
            segment = segment.replace(close_tag, "")
        outside.append(segment)
        if start < 0:
            break
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:
            errors.append(f"unclosed {open_tag} tag: {unclosed_hint}")
            break
        bodies.append(text[start + len(open_tag) : end])
        position = end + len(close_tag)
    return bodies, outside, errors

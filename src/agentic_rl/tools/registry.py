"""A name -> Tool registry, and the built-in tools."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from agentic_rl.tools.base import Tool
from agentic_rl.tools.calculator import calculator
from agentic_rl.types import ToolCall, ToolResult

__all__ = ["ToolRegistry", "BUILTIN_TOOLS", "get_tool"]


class ToolRegistry:
    """The tools one environment offers, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.register(item)

    def register(self, tool: Tool) -> Tool:
        """Add a tool; returns it so this also works as a decorator on Tools."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named '{tool.name}' is already registered")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool:
        if name not in self._tools:
            raise KeyError(f"unknown tool '{name}'; available tools: {self._available()}")
        return self._tools[name]

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict]:
        """OpenAI-format schemas of all tools, in registration order."""
        return [t.schema() for t in self._tools.values()]

    def invoke(self, call: ToolCall) -> ToolResult:
        """Run a call on the named tool. Never raises: an unknown tool is a malformed call."""
        if call.name not in self._tools:
            return ToolResult(
                name=call.name,
                content=f"Error: unknown tool '{call.name}'; available tools: {self._available()}",
                ok=False,
                call_id=call.id,
                malformed=True,
                unknown_tool=True,
            )
        return self._tools[call.name].invoke(call)

    def _available(self) -> str:
        return ", ".join(self._tools) or "none"

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()})"


BUILTIN_TOOLS: dict[str, Tool] = {t.name: t for t in (calculator,)}
"""Tools shipped with the library, by name (environments refer to them by name)."""


def get_tool(name: str) -> Tool:
    """A built-in tool by name; KeyError lists the available ones."""
    if name not in BUILTIN_TOOLS:
        raise KeyError(f"unknown built-in tool '{name}'; available: {', '.join(BUILTIN_TOOLS)}")
    return BUILTIN_TOOLS[name]

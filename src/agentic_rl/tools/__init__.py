"""Tools: ``@tool`` turns a typed, docstringed function into a validated, schema'd Tool."""

from agentic_rl.tools.base import Tool, ToolArgumentError, tool
from agentic_rl.tools.calculator import calculator
from agentic_rl.tools.memory import MemoryConfig, MemoryTools, add_memory_tools, memory_tools
from agentic_rl.tools.memory_store import MemoryStore, shared_store
from agentic_rl.tools.registry import BUILTIN_TOOLS, ToolRegistry, get_tool
from agentic_rl.tools.web import WebConfig, WebTools, web_tools

__all__ = [
    "Tool",
    "ToolArgumentError",
    "tool",
    "ToolRegistry",
    "BUILTIN_TOOLS",
    "get_tool",
    "calculator",
    "MemoryConfig",
    "MemoryStore",
    "MemoryTools",
    "add_memory_tools",
    "memory_tools",
    "shared_store",
    "WebConfig",
    "WebTools",
    "web_tools",
]

"""Tool-call formats: how tools are shown to the model and how its calls are read back."""

from agentic_rl.parsers.base import (
    DEFAULT_MAX_ARGUMENT_CHARS,
    PARSERS,
    ParseResult,
    ToolCallParser,
    get_parser,
    register_parser,
)
from agentic_rl.parsers.hermes import HermesParser
from agentic_rl.parsers.retool import RetoolParser
from agentic_rl.parsers.search_r1 import SearchR1Parser

__all__ = [
    "DEFAULT_MAX_ARGUMENT_CHARS",
    "ParseResult",
    "ToolCallParser",
    "PARSERS",
    "get_parser",
    "register_parser",
    "HermesParser",
    "RetoolParser",
    "SearchR1Parser",
]

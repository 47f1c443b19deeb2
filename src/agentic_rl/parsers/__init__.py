"""Tool-call formats: how tools are shown to the model and how its calls are read back."""

from agentic_rl.parsers.auto import FORMAT_MARKERS, detect_parser, parser_for_tokenizer, resolve_auto_parsers
from agentic_rl.parsers.base import (
    AUTO,
    DEFAULT_MAX_ARGUMENT_CHARS,
    PARSERS,
    ParseResult,
    ToolCallParser,
    get_parser,
    register_parser,
)
from agentic_rl.parsers.deepseek import DeepSeekParser
from agentic_rl.parsers.harmony import HarmonyParser
from agentic_rl.parsers.hermes import HermesParser
from agentic_rl.parsers.llama3 import Llama3JsonParser
from agentic_rl.parsers.mistral import MistralParser
from agentic_rl.parsers.phi4 import Phi4MiniParser
from agentic_rl.parsers.qwen3_coder import Qwen3CoderParser
from agentic_rl.parsers.retool import RetoolParser
from agentic_rl.parsers.search_r1 import SearchR1Parser

__all__ = [
    "AUTO",
    "DEFAULT_MAX_ARGUMENT_CHARS",
    "FORMAT_MARKERS",
    "ParseResult",
    "ToolCallParser",
    "PARSERS",
    "detect_parser",
    "get_parser",
    "parser_for_tokenizer",
    "register_parser",
    "resolve_auto_parsers",
    "DeepSeekParser",
    "HarmonyParser",
    "HermesParser",
    "Llama3JsonParser",
    "MistralParser",
    "Phi4MiniParser",
    "Qwen3CoderParser",
    "RetoolParser",
    "SearchR1Parser",
]

"""The Search-R1 tag format: ``<search> query </search>``, results in ``<information>``.

The model thinks, writes ``<search> query </search>`` to search, reads the results
inside ``<information>...</information>`` and finishes with ``<answer> ... </answer>``
(Jin et al. 2025, "Search-R1"). Every ``<search>`` block becomes a call of the tool
named ``tool_name`` (default ``search``) with argument ``{"query": ...}``.
"""

from __future__ import annotations

from agentic_rl.parsers.base import (
    DEFAULT_MAX_ARGUMENT_CHARS,
    ParseResult,
    ToolCallParser,
    argument_size_error,
    check_max_argument_chars,
    register_parser,
    scan_tag_blocks,
)
from agentic_rl.types import Message, ToolCall, ToolResult

__all__ = ["SearchR1Parser"]

OPEN_TAG, CLOSE_TAG = "<search>", "</search>"


@register_parser
class SearchR1Parser(ToolCallParser):
    """``<search>`` tags; malformed blocks (unclosed, stray close tag, empty query) are errors.

    Search-R1 allows one search per turn; ``max_calls_per_turn`` (default 1) keeps the
    first blocks and reports the rest as an error; a query over ``max_argument_chars``
    is an error, not run.
    """

    name = "search_r1"
    call_open_tag = OPEN_TAG

    def __init__(
        self,
        max_calls_per_turn: int = 1,
        tool_name: str = "search",
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    ) -> None:
        if max_calls_per_turn < 1:
            raise ValueError("max_calls_per_turn must be at least 1")
        self.max_calls_per_turn = max_calls_per_turn
        self.tool_name = tool_name
        self.max_argument_chars = check_max_argument_chars(max_argument_chars)

    def parse(self, text: str) -> ParseResult:
        calls: list[ToolCall] = []
        bodies, outside, errors = scan_tag_blocks(
            text, OPEN_TAG, CLOSE_TAG, unclosed_hint=f"end the query with {CLOSE_TAG}"
        )
        queries = [body.strip() for body in bodies]
        for query in queries[: self.max_calls_per_turn]:
            if not query:
                errors.append(f"empty query: write {OPEN_TAG} your query {CLOSE_TAG}")
            elif len(query) > self.max_argument_chars:
                errors.append(argument_size_error(len(query), self.max_argument_chars))
            elif OPEN_TAG in query:
                errors.append(f"nested {OPEN_TAG} tags")
            else:
                calls.append(ToolCall(name=self.tool_name, arguments={"query": query}, id=f"call_{len(calls)}"))
        dropped = len(queries) - self.max_calls_per_turn
        if dropped > 0:
            errors.append(
                f"too many searches in one turn: at most {self.max_calls_per_turn} allowed, the other {dropped} were not run"
            )
        content = "\n".join(piece.strip() for piece in outside if piece.strip())
        return ParseResult(calls=calls, errors=errors, content=content)

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        return (
            f"To search, write {OPEN_TAG} query {CLOSE_TAG}; the results come back between "
            "<information> and </information>. Search as many times as you need."
        )

    def format_call(self, call: ToolCall) -> str:
        return f"{OPEN_TAG} {call.arguments.get('query', '')} {CLOSE_TAG}"

    def wrap_observation(self, text: str) -> str:
        return f"<information>{text}</information>"

    def format_result(self, result: ToolResult, *, framed: bool = False) -> Message:
        return {
            "role": "tool",
            "name": result.name,
            "content": result.content if framed else self.wrap_observation(result.content),
        }

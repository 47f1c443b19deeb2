"""The ReTool tag format: code in ``<code>```python ...```</code>``, output in ``<interpreter>``.

The model reasons in plain text, writes a code block wrapped in ``<code>`` tags and ends
its turn; the environment runs it and answers with ``<interpreter>...</interpreter>``
(Feng et al. 2025, "ReTool"). Every ``<code>`` block becomes a call of the tool named
``tool_name`` (default ``python``) with argument ``{"code": ...}``.
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
from agentic_rl.types import ToolCall

__all__ = ["RetoolParser"]

OPEN_TAG, CLOSE_TAG = "<code>", "</code>"
FENCE = "```"


def _code_of(body: str) -> str:
    """The code inside one ``<code>`` body: a fenced block (```python / ```py / ```) or bare
    code; raises ValueError with the message the model sees."""
    body = body.strip()
    if not body.startswith(FENCE):
        return body  # bare code is accepted: the tags alone delimit it
    first_line, _, rest = body.partition("\n")
    language = first_line[len(FENCE) :].strip().lower()
    if language not in ("", "python", "py", "python3"):
        raise ValueError(f"the code block is marked {language!r}; only python runs here")
    if not rest.rstrip().endswith(FENCE):
        raise ValueError(f"unclosed {FENCE} fence inside {OPEN_TAG}: end the code with {FENCE} before {CLOSE_TAG}")
    return rest.rstrip()[: -len(FENCE)].strip("\n")


@register_parser
class RetoolParser(ToolCallParser):
    """``<code>`` tags around a fenced python block; malformed blocks (unclosed tag or
    fence, stray close tag, empty code, another language) are errors, not calls.

    ReTool runs one block per turn; ``max_calls_per_turn`` (default 1) keeps the first
    blocks and reports the rest as an error; a block over ``max_argument_chars`` is an
    error, not run. ``parse(format_call(c))`` round-trips unless
    the code itself contains the text ``</code>``.
    """

    name = "retool"
    call_open_tag = OPEN_TAG

    def __init__(
        self,
        max_calls_per_turn: int = 1,
        tool_name: str = "python",
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    ) -> None:
        if max_calls_per_turn < 1:
            raise ValueError("max_calls_per_turn must be at least 1")
        self.max_calls_per_turn = max_calls_per_turn
        self.tool_name = tool_name
        self.max_argument_chars = check_max_argument_chars(max_argument_chars)

    def parse(self, text: str) -> ParseResult:
        bodies, outside, errors = scan_tag_blocks(
            text, OPEN_TAG, CLOSE_TAG, unclosed_hint=f"end the code block with {CLOSE_TAG}"
        )
        calls: list[ToolCall] = []
        for body in bodies[: self.max_calls_per_turn]:
            too_long = argument_size_error(len(body.strip()), self.max_argument_chars)
            if too_long:
                errors.append(too_long)
                continue
            if OPEN_TAG in body:
                errors.append(f"nested {OPEN_TAG} tags")
                continue
            try:
                code = _code_of(body)
            except ValueError as error:
                errors.append(str(error))
                continue
            if not code.strip():
                errors.append(f"empty code block: write {OPEN_TAG}\n{FENCE}python\n...\n{FENCE}\n{CLOSE_TAG}")
                continue
            calls.append(ToolCall(name=self.tool_name, arguments={"code": code}, id=f"call_{len(calls)}"))
        dropped = len(bodies) - self.max_calls_per_turn
        if dropped > 0:
            errors.append(
                f"too many code blocks in one turn: at most {self.max_calls_per_turn} allowed, the other {dropped} were not run"
            )
        content = "\n".join(piece.strip() for piece in outside if piece.strip())
        return ParseResult(calls=calls, errors=errors, content=content)

    def format_tools_prompt(self, schemas: list[dict]) -> str:
        return (
            f"To run Python, write the code in a block like this and end your turn:\n"
            f"{OPEN_TAG}\n{FENCE}python\nprint(2 + 3)\n{FENCE}\n{CLOSE_TAG}\n"
            "Variables persist between blocks. What the code prints comes back between "
            "<interpreter> and </interpreter>."
        )

    def format_call(self, call: ToolCall) -> str:
        return f"{OPEN_TAG}\n{FENCE}python\n{call.arguments.get('code', '')}\n{FENCE}\n{CLOSE_TAG}"

    def wrap_observation(self, text: str) -> str:
        return f"<interpreter>\n{text}\n</interpreter>"

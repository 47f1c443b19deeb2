"""The ReTool tag format: <code>```python ...```</code> calls, <interpreter> observations."""

from __future__ import annotations

import pytest

from agentic_rl.parsers import PARSERS, RetoolParser, get_parser
from agentic_rl.types import ToolCall, ToolResult

BLOCK = "<code>\n```python\nx = 6 * 7\nprint(x)\n```\n</code>"


@pytest.fixture
def parser() -> RetoolParser:
    return RetoolParser()


def test_registry() -> None:
    assert PARSERS["retool"] is RetoolParser
    built = get_parser("retool", max_calls_per_turn=2, tool_name="py")
    assert (built.max_calls_per_turn, built.tool_name) == (2, "py")
    with pytest.raises(ValueError, match="max_calls_per_turn"):
        RetoolParser(max_calls_per_turn=0)


def test_fenced_block_becomes_a_python_call(parser: RetoolParser) -> None:
    result = parser.parse(f"Let me compute.\n{BLOCK}")
    assert result.calls == [ToolCall(name="python", arguments={"code": "x = 6 * 7\nprint(x)"}, id="call_0")]
    assert result.errors == [] and result.content == "Let me compute."


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("```py\nprint(1)\n```", "print(1)"),
        ("```\nprint(1)\n```", "print(1)"),
        ("```python3\nprint(1)```", "print(1)"),
        ("print(1)", "print(1)"),  # bare code: the tags alone delimit it
        (
            "\n  ```python\n    if True:\n        print(1)\n```  \n",
            "    if True:\n        print(1)",
        ),  # inner indentation kept
    ],
)
def test_accepted_bodies(parser: RetoolParser, body: str, code: str) -> None:
    result = parser.parse(f"<code>{body}</code>")
    assert result.errors == [] and [c.arguments["code"] for c in result.calls] == [code]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<code>\n```python\nprint(1)\n", "unclosed <code> tag"),
        ("<code>```python\nprint(1)\n</code>", "unclosed ``` fence"),
        ("print(1)</code>", "</code> without a matching <code>"),
        ("<code>```python\n\n```</code>", "empty code block"),
        ("<code>   </code>", "empty code block"),
        ("<code>```bash\nls\n```</code>", "marked 'bash'"),
        ("<code> <code>print(1)</code>", "nested <code>"),
    ],
)
def test_malformed_blocks_are_errors_not_calls(parser: RetoolParser, text: str, error: str) -> None:
    result = parser.parse(text)
    assert result.calls == [] and len(result.errors) == 1 and error in result.errors[0]
    assert result.has_calls  # the model tried: the env answers with an error observation


def test_one_block_per_turn_by_default(parser: RetoolParser) -> None:
    result = parser.parse(f"{BLOCK}\nand\n<code>print(2)</code>")
    assert [c.arguments["code"] for c in result.calls] == ["x = 6 * 7\nprint(x)"]
    assert result.errors == ["too many code blocks in one turn: at most 1 allowed, the other 1 were not run"]
    two = RetoolParser(max_calls_per_turn=2).parse(f"{BLOCK}\nand\n<code>print(2)</code>")
    assert [c.id for c in two.calls] == ["call_0", "call_1"] and two.errors == [] and two.content == "and"


def test_plain_text_and_answers_are_not_calls(parser: RetoolParser) -> None:
    result = parser.parse("The answer is <answer>42</answer>. I used `code` and ```python``` words.")
    assert not result.has_calls


@pytest.mark.parametrize(
    "code", ["print(1)", "for i in range(3):\n    print(i)", "s = '```'\nprint(s)", "print('<interpreter>')"]
)
def test_format_call_round_trips(parser: RetoolParser, code: str) -> None:
    text = parser.format_call(ToolCall(name="python", arguments={"code": code}))
    assert text == f"<code>\n```python\n{code}\n```\n</code>"
    result = parser.parse(text)
    assert result.errors == [] and result.content == "" and result.calls[0].arguments == {"code": code}


def test_observation_is_wrapped_in_interpreter_tags(parser: RetoolParser) -> None:
    message = parser.format_result(ToolResult(name="python", content="42"))
    assert message == {"role": "tool", "name": "python", "content": "<interpreter>\n42\n</interpreter>"}
    assert parser.format_error("bad")["content"] == "<interpreter>\nError: bad\n</interpreter>"
    prompt = parser.format_tools_prompt([])
    assert "<code>\n```python\n" in prompt and "<interpreter>" in prompt


def test_code_size_cap() -> None:
    parser = RetoolParser(max_argument_chars=200)
    ok = parser.parse(BLOCK)
    assert len(ok.calls) == 1 and ok.errors == []
    long_block = "<code>\n```python\n" + "x = 1\n" * 100 + "```\n</code>"
    result = parser.parse(long_block)
    assert result.calls == [] and "at most 200 are allowed" in result.errors[0]


def test_search_query_size_cap() -> None:
    parser = get_parser("search_r1", max_argument_chars=50)
    assert [call.arguments for call in parser.parse("<search> capital of France </search>").calls] == [
        {"query": "capital of France"}
    ]
    result = parser.parse(f"<search> {'word ' * 20} </search>")
    assert result.calls == [] and "at most 50 are allowed" in result.errors[0]

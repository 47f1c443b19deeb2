"""The Qwen3-Coder XML parser: <tool_call><function=NAME><parameter=KEY>VALUE</parameter>..."""

from __future__ import annotations

import pytest

from agentic_rl.parsers import PARSERS, Qwen3CoderParser, get_parser
from agentic_rl.parsers.messages import assistant_text
from agentic_rl.tools import ToolRegistry, calculator, tool
from agentic_rl.types import ToolCall


@tool
def lookup(query: str, limit: int, exact: bool = False, weights: list[float] | None = None) -> str:
    """Look something up.

    Args:
        query: what to look for
        limit: how many results
        exact: exact match only
        weights: per-field weights
    """
    return query


def block(name: str, **values: str) -> str:
    parameters = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in values.items())
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


@pytest.fixture
def parser() -> Qwen3CoderParser:
    return Qwen3CoderParser()


def test_registered() -> None:
    assert PARSERS["qwen3_coder"] is Qwen3CoderParser
    assert get_parser("qwen3_coder", max_calls_per_turn=2, max_argument_chars=100).call_open_tag == "<tool_call>"


def test_single_call_values_are_text(parser: Qwen3CoderParser) -> None:
    result = parser.parse(block("lookup", query="cats", limit="3") + "<|im_end|>")
    assert result.calls == [ToolCall("lookup", {"query": "cats", "limit": "3"}, id="call_0")]
    assert result.errors == [] and result.content == ""


def test_multiline_values_keep_inner_newlines(parser: Qwen3CoderParser) -> None:
    code = "def f(x):\n    return x < 3 and x > 1\n\nprint(f(2))"
    result = parser.parse(block("python", code=code))
    assert result.calls[0].arguments == {"code": code}


def test_several_calls_and_text_around(parser: Qwen3CoderParser) -> None:
    text = f"Let me look.\n{block('lookup', query='a', limit='1')}\nand\n{block('calculator', expression='2+3')}\nDone."
    result = parser.parse(text)
    assert [(c.name, c.id) for c in result.calls] == [("lookup", "call_0"), ("calculator", "call_1")]
    assert result.content == "Let me look.\nand\nDone."


def test_typed_values_with_schema() -> None:
    parser = Qwen3CoderParser(schemas=[lookup.schema()])
    text = block("lookup", query="42", limit="3", exact="true", weights="[0.5, 1]")
    assert parser.parse(text).calls[0].arguments == {"query": "42", "limit": 3, "exact": True, "weights": [0.5, 1]}
    # a value that does not fit its type stays text, for the tool's validation to report
    wrong = parser.parse(block("lookup", query="q", limit="three")).calls[0]
    assert wrong.arguments == {"query": "q", "limit": "three"}
    assert lookup.invoke(wrong).content.startswith("Error: argument 'limit' must be integer")
    unbound = Qwen3CoderParser()
    unbound.bind_tools([lookup.schema()])  # what ToolEnv does with its tools
    assert unbound.parse(block("lookup", query="q", limit="7")).calls[0].arguments["limit"] == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<tool_call>\n<function=lookup>\n<parameter=query>\nx\n</parameter>\n</function>", "unclosed <tool_call>"),
        (
            "<tool_call>\n<function=lookup>\n<parameter=query>\nx\n</parameter>\n</tool_call>",
            "unclosed <function=lookup>",
        ),
        (
            "<tool_call>\n<function=lookup>\n<parameter=query>\nx\n</function>\n</tool_call>",
            "unclosed <parameter=query>",
        ),
        ("<tool_call>\n<function=lookup\n</function>\n</tool_call>", None),
        ('<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>', "must hold <function=NAME>"),
        ("<tool_call>\n<function=>\n</function>\n</tool_call>", "missing the tool name"),
        ("<tool_call>\n<function=my tool>\n</function>\n</tool_call>", "must not contain spaces"),
        ("<tool_call>\n<function=f>\n<parameter=>\nx\n</parameter>\n</function>\n</tool_call>", "has no name"),
        (block("f", q="1").replace("</function>", "<parameter=q>\n2\n</parameter>\n</function>"), "given twice"),
        (block("f", q="a </parameter> b"), "text outside <parameter=...> in 'f'"),
        ("<tool_call>\n<function=f>\nloose text\n</function>\n</tool_call>", "text outside"),
        ("</tool_call>", "without a matching <tool_call>"),
    ],
)
def test_malformed_calls_are_errors(parser: Qwen3CoderParser, text: str, message: str | None) -> None:
    result = parser.parse(text)
    assert result.calls == [] and result.has_calls
    assert len(result.errors) == 1, result.errors
    assert message is None or message in result.errors[0], result.errors


def test_unknown_tool_becomes_an_observation(parser: Qwen3CoderParser) -> None:
    call = parser.parse(block("nope", x="1")).calls[0]
    assert ToolRegistry([calculator]).invoke(call).content.startswith("Error: unknown tool 'nope'")


def test_limits() -> None:
    text = "\n".join(block(name) for name in "abc")
    result = Qwen3CoderParser(max_calls_per_turn=2).parse(text)
    assert [c.name for c in result.calls] == ["a", "b"] and "too many tool calls" in result.errors[0]
    long = Qwen3CoderParser(max_argument_chars=30).parse(block("lookup", query="x" * 40))
    assert long.calls == [] and "characters long" in long.errors[0]


def test_round_trip() -> None:
    parser = Qwen3CoderParser(schemas=[lookup.schema()])
    calls = [
        ToolCall("lookup", {"query": "multi\nline <b>", "limit": 3, "exact": False, "weights": [0.5, 2]}, id="call_0"),
        ToolCall("calculator", {"expression": "2+3"}, id="call_1"),
    ]
    text = parser.format_calls(calls)
    assert text.startswith("<tool_call>\n<function=lookup>\n<parameter=query>\nmulti\nline <b>\n</parameter>\n")
    assert "<parameter=limit>\n3\n</parameter>" in text and "<parameter=exact>\nfalse\n</parameter>" in text
    assert parser.parse(text).calls == calls
    parsed = parser.parse(assistant_text("Looking.", calls, parser))
    assert parsed.calls == calls and parsed.content == "Looking."


def test_results_framed_and_prompt_lists_tools(parser: Qwen3CoderParser) -> None:
    assert parser.wrap_observation("5") == "<tool_response>\n5\n</tool_response>"
    prompt = parser.format_tools_prompt([lookup.schema()])
    assert "<tools>\n<function>\n<name>lookup</name>" in prompt
    assert "<parameter>\n<name>limit</name>\n<type>integer</type>" in prompt
    assert "<function=example_function_name>" in prompt and parser.format_tools_prompt([]) == ""

"""The hermes <tool_call>{json}</tool_call> parser."""

from __future__ import annotations

import json

import pytest

from agentic_rl.parsers import PARSERS, HermesParser, ParseResult, ToolCallParser, get_parser
from agentic_rl.tools import calculator
from agentic_rl.types import ToolCall, ToolResult

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>'


@pytest.fixture
def parser() -> HermesParser:
    return HermesParser()


def test_registry() -> None:
    assert PARSERS["hermes"] is HermesParser
    built = get_parser("hermes", max_calls_per_turn=2)
    assert isinstance(built, HermesParser) and isinstance(built, ToolCallParser)
    assert built.max_calls_per_turn == 2
    with pytest.raises(KeyError, match="available parsers: .*hermes"):
        get_parser("nope")


def test_single_call(parser: HermesParser) -> None:
    result = parser.parse(f"Let me compute this.\n{CALL}")
    assert result.calls == [ToolCall(name="calculator", arguments={"expression": "2+3"}, id="call_0")]
    assert result.errors == []
    assert result.content == "Let me compute this."
    assert result.has_calls


def test_multiple_calls_and_content(parser: HermesParser) -> None:
    text = (
        "First.\n"
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>\n'
        "Then.\n"
        '<tool_call>{"name": "search", "arguments": {"query": "x", "limit": 3}}</tool_call>\n'
        "Done."
    )
    result = parser.parse(text)
    assert result.calls == [
        ToolCall(name="calculator", arguments={"expression": "1+1"}, id="call_0"),
        ToolCall(name="search", arguments={"query": "x", "limit": 3}, id="call_1"),
    ]
    assert result.errors == []
    assert result.content == "First.\nThen.\nDone."


def test_plain_text_has_no_calls(parser: HermesParser) -> None:
    result = parser.parse("  The answer is 5.  ")
    assert result == ParseResult(calls=[], errors=[], content="The answer is 5.")
    assert not result.has_calls


def test_missing_arguments_defaults_to_empty(parser: HermesParser) -> None:
    result = parser.parse('<tool_call>{"name": "now"}</tool_call>')
    assert result.calls == [ToolCall(name="now", arguments={}, id="call_0")]


@pytest.mark.parametrize(
    "call",
    [
        ToolCall(name="calculator", arguments={"expression": "2+3"}),
        ToolCall(name="search", arguments={"query": "über </tool_call>?", "ids": [1, 2], "x": None}),
        ToolCall(name="now", arguments={}),
    ],
)
def test_format_call_round_trips(parser: HermesParser, call: ToolCall) -> None:
    text = parser.format_call(call)
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
    assert text.count("\n") == 2  # compact single-line JSON inside
    result = parser.parse(text)
    assert result.errors == [] and result.content == ""
    assert [(c.name, c.arguments) for c in result.calls] == [(call.name, call.arguments)]


def test_format_call_exact(parser: HermesParser) -> None:
    assert parser.format_call(ToolCall(name="calculator", arguments={"expression": "2+3"})) == CALL


def test_invalid_json(parser: HermesParser) -> None:
    result = parser.parse('<tool_call>{"name": "calculator", "arguments": {"expression": 2+3}}</tool_call>')
    assert result.calls == []
    assert len(result.errors) == 1
    assert result.errors[0].startswith("invalid JSON in <tool_call>: ")
    assert "line 1 column" in result.errors[0]
    assert result.has_calls  # a failed attempt still counts as trying to call


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('["calculator", {"expression": "1"}]', 'must contain a JSON object with "name" and "arguments"'),
        ('"calculator"', 'must contain a JSON object with "name" and "arguments"'),
        ('{"arguments": {"expression": "1"}}', 'tool call is missing "name"'),
        ('{"name": 3, "arguments": {}}', 'tool call "name" must be a non-empty string'),
        ('{"name": "", "arguments": {}}', 'tool call "name" must be a non-empty string'),
        ('{"name": "calculator", "arguments": ["1+1"]}', "\"arguments\" of 'calculator' must be a JSON object"),
        ('{"name": "calculator", "arguments": "1+1"}', "\"arguments\" of 'calculator' must be a JSON object"),
        ('{"name": "calculator", "arguments": "[1]"}', "\"arguments\" of 'calculator' must be a JSON object"),
        ('{"name": "calculator", "arguments": null}', "\"arguments\" of 'calculator' must be a JSON object"),
    ],
)
def test_malformed_payloads(parser: HermesParser, body: str, message: str) -> None:
    result = parser.parse(f"Trying. <tool_call>{body}</tool_call>")
    assert result.calls == []
    assert len(result.errors) == 1
    assert message in result.errors[0]
    assert result.content == "Trying."


def test_arguments_as_json_string_accepted(parser: HermesParser) -> None:
    body = json.dumps({"name": "calculator", "arguments": json.dumps({"expression": "6*7"})})
    result = parser.parse(f"<tool_call>{body}</tool_call>")
    assert result.errors == []
    assert result.calls == [ToolCall(name="calculator", arguments={"expression": "6*7"}, id="call_0")]


def test_malformed_call_does_not_shift_ids(parser: HermesParser) -> None:
    text = CALL + "<tool_call>{oops}</tool_call>" + CALL
    result = parser.parse(text)
    assert [c.id for c in result.calls] == ["call_0", "call_1"]
    assert len(result.errors) == 1


def test_unclosed_tag(parser: HermesParser) -> None:
    result = parser.parse('Computing. <tool_call>{"name": "calculator", "arguments": {"expression": "1"}}')
    assert result.calls == []
    assert result.errors == ["unclosed <tool_call> tag: end each call with </tool_call>"]
    assert result.content == "Computing."


def test_unclosed_tag_after_valid_call(parser: HermesParser) -> None:
    result = parser.parse(CALL + " and <tool_call>{")
    assert [c.arguments for c in result.calls] == [{"expression": "2+3"}]
    assert result.errors == ["unclosed <tool_call> tag: end each call with </tool_call>"]
    assert result.content == "and"


def test_closing_tag_without_opening(parser: HermesParser) -> None:
    result = parser.parse('{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>')
    assert result.calls == []
    assert result.errors == ["found </tool_call> without a matching <tool_call>"]


def test_too_many_calls() -> None:
    parser = HermesParser(max_calls_per_turn=2)
    calls = [ToolCall(name="calculator", arguments={"expression": f"{i}+1"}) for i in range(5)]
    result = parser.parse("\n".join(parser.format_call(c) for c in calls))
    assert [c.arguments["expression"] for c in result.calls] == ["0+1", "1+1"]
    assert [c.id for c in result.calls] == ["call_0", "call_1"]
    assert result.errors == ["too many tool calls in one turn: at most 2 allowed, the other 3 were not executed"]
    assert result.content == ""


def test_max_calls_must_be_positive() -> None:
    with pytest.raises(ValueError):
        HermesParser(max_calls_per_turn=0)


def test_format_tools_prompt(parser: HermesParser) -> None:
    prompt = parser.format_tools_prompt([calculator.schema()])
    lines = prompt.splitlines()
    start, end = lines.index("<tools>"), lines.index("</tools>")
    assert [json.loads(line) for line in lines[start + 1 : end]] == [calculator.schema()]
    assert "<tool_call>" in prompt and "</tool_call>" in prompt and "<tool_response>" in prompt
    assert len(prompt) - len(json.dumps(calculator.schema())) < 300  # short: small model, small context
    assert parser.format_tools_prompt([]) == ""


def test_format_result_and_error(parser: HermesParser) -> None:
    result = ToolResult(name="calculator", content="5", call_id="call_0")
    assert parser.format_result(result) == {
        "role": "tool",
        "name": "calculator",
        "content": "<tool_response>\n5\n</tool_response>",
    }
    message = parser.format_error("invalid JSON in <tool_call>: Expecting value")
    assert message["role"] == "tool"
    assert (
        message["content"] == "<tool_response>\nError: invalid JSON in <tool_call>: Expecting value\n</tool_response>"
    )


@pytest.mark.parametrize("body", ["[" * 100_000, '{"name": "calculator", "arguments": ' + "[" * 100_000])
def test_deeply_nested_json_is_a_malformed_call(body: str) -> None:
    # json.loads raises RecursionError on these; it must become an error, not escape.
    parser = HermesParser(max_argument_chars=10**6)  # past the size cap, so the JSON is decoded
    result = parser.parse(f"<tool_call>{body}</tool_call>")
    assert result.calls == []
    assert len(result.errors) == 1 and "nested too deeply" in result.errors[0]


def test_deeply_nested_arguments_string_is_rejected() -> None:
    parser = HermesParser(max_argument_chars=10**6)
    body = json.dumps({"name": "calculator", "arguments": "[" * 100_000})
    result = parser.parse(f"<tool_call>{body}</tool_call>")
    assert result.calls == [] and "must be a JSON object" in result.errors[0]


def test_argument_size_cap() -> None:
    parser = HermesParser(max_argument_chars=100)
    small = ToolCall(name="calculator", arguments={"expression": "1+1"})
    big = ToolCall(name="calculator", arguments={"expression": "1+" * 100 + "1"})
    result = parser.parse(parser.format_call(small) + parser.format_call(big))
    assert [call.arguments for call in result.calls] == [small.arguments]
    assert len(result.errors) == 1 and "at most 100 are allowed" in result.errors[0]
    with pytest.raises(ValueError, match="max_argument_chars"):
        HermesParser(max_argument_chars=0)


def test_default_argument_size_cap_rejects_megabytes(parser: HermesParser) -> None:
    call = ToolCall(name="calculator", arguments={"expression": "1" * 1_000_000})
    result = parser.parse(parser.format_call(call))
    assert result.calls == [] and "not run" in result.errors[0]

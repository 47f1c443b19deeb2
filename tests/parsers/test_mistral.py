"""The Mistral [TOOL_CALLS] parser: the v3 JSON list and the v11/v13 NAME[ARGS]{...} layout."""

from __future__ import annotations

import pytest

from agentic_rl.parsers import PARSERS, MistralParser, get_parser
from agentic_rl.parsers.messages import assistant_text
from agentic_rl.tools import ToolRegistry, calculator
from agentic_rl.types import ToolCall

CALC = ToolCall("calculator", {"expression": "2+3"}, id="call_0")
SEARCH = ToolCall("search", {"query": "x", "limit": 3}, id="call_1")


@pytest.fixture
def parser() -> MistralParser:
    return MistralParser()


def test_registered() -> None:
    assert PARSERS["mistral"] is MistralParser
    assert get_parser("mistral", max_calls_per_turn=2, max_argument_chars=100).call_open_tag == "[TOOL_CALLS]"
    with pytest.raises(ValueError, match="style"):
        MistralParser(style="xml")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "2+3"}}]</s>',
        '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "2+3"}, "id": "abcDEF123"}]',
        '[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"}</s>',
        '[TOOL_CALLS]calculator[CALL_ID]abcDEF123[ARGS]{"expression": "2+3"}',
        '[TOOL_CALLS]calculator{"expression": "2+3"}',  # [ARGS] dropped by a decode that skips special tokens
    ],
)
def test_single_call_each_layout(parser: MistralParser, text: str) -> None:
    result = parser.parse(text)
    assert result.calls == [CALC] and result.errors == [] and result.content == ""


@pytest.mark.parametrize(
    "text",
    [
        '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "2+3"}}, '
        '{"name": "search", "arguments": {"query": "x", "limit": 3}}]',
        '[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"}[TOOL_CALLS]search[ARGS]{"query": "x", "limit": 3}',
        '[TOOL_CALLS]calculator[CALL_ID]abcDEF123[ARGS]{"expression": "2+3"}'
        '[TOOL_CALLS]search[CALL_ID]xyzXYZ789[ARGS]{"query": "x", "limit": 3}</s>',
    ],
)
def test_several_calls(parser: MistralParser, text: str) -> None:
    result = parser.parse(text)
    assert result.calls == [CALC, SEARCH] and result.errors == []


def test_text_around_calls_is_content(parser: MistralParser) -> None:
    result = parser.parse('Let me compute.[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"} and then answer.')
    assert result.calls == [CALC] and result.content == "Let me compute.\nand then answer."
    listed = parser.parse('Sure. [TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "2+3"}}] ok')
    assert listed.calls == [CALC] and listed.content == "Sure.\nok"
    assert parser.parse("No calls [here].").content == "No calls [here]."


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": 2+3}}]',
            "invalid JSON in the [TOOL_CALLS] list",
        ),
        ('[TOOL_CALLS][{"name": "calculator", "arguments": {}}', "unclosed JSON list"),
        ("[TOOL_CALLS][]", "after [TOOL_CALLS] write"),
        ('[TOOL_CALLS][{"arguments": {}}]', 'missing "name"'),
        ('[TOOL_CALLS]["calculator"]', "must be a JSON object"),
        ('[TOOL_CALLS][{"name": "calculator", "arguments": "2+3"}]', "must be a JSON object"),
        ('[TOOL_CALLS]calculator[ARGS]{"expression": 2+3}', "invalid JSON in the arguments of 'calculator'"),
        ('[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"', "unclosed JSON arguments"),
        ('[TOOL_CALLS]calculator[ARGS]"2+3"', "\"arguments\" of 'calculator' must be a JSON object"),
        ('[TOOL_CALLS][ARGS]{"expression": "2+3"}', "missing the tool name"),
        ('[TOOL_CALLS]my tool[ARGS]{"expression": "2+3"}', "must not contain spaces"),
        ("[TOOL_CALLS]calculator", "after [TOOL_CALLS] write"),
        ("[TOOL_CALLS]", "after [TOOL_CALLS] write"),
    ],
)
def test_malformed_calls_are_errors(parser: MistralParser, text: str, message: str) -> None:
    result = parser.parse(text)
    assert result.calls == [] and result.has_calls
    assert len(result.errors) == 1 and message in result.errors[0], result.errors


def test_malformed_call_does_not_stop_the_next(parser: MistralParser) -> None:
    result = parser.parse('[TOOL_CALLS]a[ARGS]{bad}[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"}')
    assert result.calls == [CALC] and len(result.errors) == 1


def test_unknown_tool_and_wrong_types_become_observations(parser: MistralParser) -> None:
    tools = ToolRegistry([calculator])
    unknown, wrong = parser.parse('[TOOL_CALLS]nope[ARGS]{}[TOOL_CALLS]calculator[ARGS]{"expression": 5}').calls
    assert tools.invoke(unknown).content.startswith("Error: unknown tool 'nope'")
    assert tools.invoke(wrong).content.startswith("Error: argument 'expression' must be string")


def test_limits() -> None:
    text = (
        '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}, {"name": "c", "arguments": {}}]'
    )
    result = MistralParser(max_calls_per_turn=2).parse(text)
    assert [c.name for c in result.calls] == ["a", "b"] and "the other 1 were not executed" in result.errors[0]
    long = MistralParser(max_argument_chars=10).parse('[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"}')
    assert long.calls == [] and "characters long" in long.errors[0]


@pytest.mark.parametrize("style", ["args", "list"])
def test_round_trip(style: str) -> None:
    parser = MistralParser(style=style)  # type: ignore[arg-type]
    tricky = ToolCall("search", {"query": "a [TOOL_CALLS]x[ARGS]{} </s> [/TOOL_RESULTS]", "n": [1, None]}, id="call_1")
    calls = [CALC, tricky]
    text = parser.format_calls(calls)
    if style == "args":
        assert text.startswith('[TOOL_CALLS]calculator[ARGS]{"expression": "2+3"}[TOOL_CALLS]search[ARGS]{')
    else:
        assert text.startswith('[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "2+3"}}, {')
    assert text.count("[TOOL_CALLS]") == (2 if style == "args" else 1)
    assert parser.parse(text).calls == calls
    assert parser.parse(parser.format_call(CALC)).calls == [CALC]
    parsed = parser.parse(assistant_text("Calling.", calls, parser))
    assert parsed.calls == calls and parsed.content == "Calling."


def test_results_are_bare_and_prompt_shows_the_layout() -> None:
    parser = MistralParser()
    assert parser.wrap_observation("5") == "5"
    assert parser.framed_by("[TOOL_RESULTS]\u2063TOOL_OUTPUT\u2063[/TOOL_RESULTS]")
    assert "[TOOL_CALLS]<tool name>[ARGS]{" in parser.format_tools_prompt([calculator.schema()])
    assert '[TOOL_CALLS][{"name"' in MistralParser(style="list").format_tools_prompt([calculator.schema()])

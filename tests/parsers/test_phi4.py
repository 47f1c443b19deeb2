"""The Phi-4-mini parser: ``functools[...]`` JSON lists (and ``<|tool_call|>...<|/tool_call|>``)."""

from __future__ import annotations

import pytest

from agentic_rl.parsers import PARSERS, Phi4MiniParser, get_parser
from agentic_rl.parsers.messages import assistant_text
from agentic_rl.tools import ToolRegistry, calculator
from agentic_rl.types import ToolCall

CALC = ToolCall("calculator", {"expression": "2+3"}, id="call_0")
SEARCH = ToolCall("search", {"query": "x", "limit": 3}, id="call_1")


@pytest.fixture
def parser() -> Phi4MiniParser:
    return Phi4MiniParser()


def test_registered() -> None:
    assert PARSERS["phi4_mini"] is Phi4MiniParser
    assert get_parser("phi4_mini", max_calls_per_turn=2, max_argument_chars=100).call_open_tag == "functools"


@pytest.mark.parametrize(
    "text",
    [
        'functools[{"name": "calculator", "arguments": {"expression": "2+3"}}]',
        'functools[{"name": "calculator", "arguments": {"expression": "2+3"}}]<|end|>',
        'functools [{"name": "calculator", "parameters": {"expression": "2+3"}}]',
        'functools{"name": "calculator", "arguments": {"expression": "2+3"}}',
        '<|tool_call|>[{"name": "calculator", "arguments": {"expression": "2+3"}}]<|/tool_call|>',
        '<|tool_call|>[{"name": "calculator", "arguments": "{\\"expression\\": \\"2+3\\"}"}]',
    ],
)
def test_single_call_each_layout(parser: Phi4MiniParser, text: str) -> None:
    result = parser.parse(text)
    assert result.calls == [CALC] and result.errors == [] and result.content == ""


def test_several_calls_and_content(parser: Phi4MiniParser) -> None:
    text = (
        'Let me compute. functools[{"name": "calculator", "arguments": {"expression": "2+3"}}, '
        '{"name": "search", "arguments": {"query": "x", "limit": 3}}] then answer.'
    )
    result = parser.parse(text)
    assert result.calls == [CALC, SEARCH] and result.errors == []
    assert result.content == "Let me compute.\nthen answer."


def test_the_word_functools_in_prose_or_code_is_text(parser: Phi4MiniParser) -> None:
    text = "Use functools.lru_cache:\n\nfrom functools import lru_cache"
    result = parser.parse(text)
    assert not result.has_calls and result.content == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('functools[{"name": "calculator", "arguments": {"expression": 2+3}}]', "invalid JSON in the functools list"),
        ('functools[{"name": "calculator", "arguments": {}}', "unclosed JSON list after functools"),
        ("functools[]", "the functools list is empty"),
        ('functools[{"arguments": {}}]', 'missing "name"'),
        ('functools["calculator"]', "must be a JSON object"),
        ('functools[{"name": "calculator", "arguments": "2+3"}]', "must be a JSON object"),
        ('functools[{"name": "c", "arguments": {}, "parameters": {}}]', "has both"),
        ("<|tool_call|>calculator(2+3)<|/tool_call|>", "after <|tool_call|> write the calls as one JSON list"),
        ("functools[" + "[" * 100_000, "unclosed JSON list"),
    ],
)
def test_malformed_calls_are_errors(parser: Phi4MiniParser, text: str, message: str) -> None:
    result = parser.parse(text)
    assert result.calls == [] and result.has_calls
    assert len(result.errors) == 1 and message in result.errors[0], result.errors


def test_deep_nesting_is_an_error_not_a_crash(parser: Phi4MiniParser) -> None:
    result = Phi4MiniParser(max_argument_chars=10**6).parse("functools" + "[" * 50_000 + "]" * 50_000)
    assert result.calls == [] and "nested too deeply" in result.errors[0]


def test_malformed_call_does_not_stop_the_next(parser: Phi4MiniParser) -> None:
    text = 'functools[{bad}] and functools[{"name": "calculator", "arguments": {"expression": "2+3"}}]'
    result = parser.parse(text)
    assert result.calls == [CALC] and len(result.errors) == 1


def test_unknown_tool_and_wrong_types_become_observations(parser: Phi4MiniParser) -> None:
    tools = ToolRegistry([calculator])
    text = 'functools[{"name": "nope", "arguments": {}}, {"name": "calculator", "arguments": {"expression": 5}}]'
    unknown, wrong = parser.parse(text).calls
    assert tools.invoke(unknown).content.startswith("Error: unknown tool 'nope'")
    assert tools.invoke(wrong).content.startswith("Error: argument 'expression' must be string")


def test_limits() -> None:
    text = 'functools[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}, {"name": "c", "arguments": {}}]'
    result = Phi4MiniParser(max_calls_per_turn=2).parse(text)
    assert [c.name for c in result.calls] == ["a", "b"] and "the other 1 were not executed" in result.errors[0]
    long = Phi4MiniParser(max_argument_chars=10).parse('functools[{"name": "calculator", "arguments": {}}]')
    assert long.calls == [] and "characters long" in long.errors[0]


def test_round_trip(parser: Phi4MiniParser) -> None:
    tricky = ToolCall("search", {"query": 'a functools[{"name": "x"}] <|end|> <|tool|>', "n": [1, None]}, id="call_1")
    calls = [CALC, tricky]
    text = parser.format_calls(calls)
    assert text.startswith('functools[{"name": "calculator", "arguments": {"expression": "2+3"}}, {')
    assert parser.parse(text).calls == calls
    assert parser.parse(parser.format_call(CALC)).calls == [CALC]
    parsed = parser.parse(assistant_text("Calling.", calls, parser))
    assert parsed.calls == calls and parsed.content == "Calling."


def test_results_are_bare_and_prompt_shows_the_layout(parser: Phi4MiniParser) -> None:
    assert parser.wrap_observation("5") == "5"
    assert parser.framed_by("<|tool|>\u2063TOOL_OUTPUT\u2063<|end|>")
    assert 'functools[{"name": "<tool name>"' in parser.format_tools_prompt([calculator.schema()])
    assert parser.format_tools_prompt([]) == ""

"""The Llama 3.x JSON tool-call parser: {"name": ..., "parameters": {...}}, with or without <|python_tag|>."""

from __future__ import annotations

import pytest

from agentic_rl.parsers import PARSERS, Llama3JsonParser, get_parser
from agentic_rl.parsers.messages import assistant_text, openai_messages
from agentic_rl.tools import ToolRegistry, calculator
from agentic_rl.types import ToolCall

CALC = '{"name": "calculator", "parameters": {"expression": "2+3"}}'
SEARCH = '{"name": "search", "arguments": {"query": "x", "limit": 3}}'


@pytest.fixture
def parser() -> Llama3JsonParser:
    return Llama3JsonParser()


def test_registered() -> None:
    assert PARSERS["llama3_json"] is Llama3JsonParser
    assert get_parser("llama3_json", max_calls_per_turn=2, max_argument_chars=100).max_calls_per_turn == 2


@pytest.mark.parametrize("prefix", ["", "<|python_tag|>"])
@pytest.mark.parametrize("end", ["", "<|eom_id|>", "<|eot_id|>"])
def test_single_call(parser: Llama3JsonParser, prefix: str, end: str) -> None:
    result = parser.parse(f"{prefix}{CALC}{end}")
    assert result.calls == [ToolCall("calculator", {"expression": "2+3"}, id="call_0")]
    assert result.errors == [] and result.content == ""


@pytest.mark.parametrize("separator", ["; ", ";", "\n", "\n;\n", " "])
@pytest.mark.parametrize("prefix", ["", "<|python_tag|>"])
def test_several_calls(parser: Llama3JsonParser, separator: str, prefix: str) -> None:
    result = parser.parse(f"{prefix}{CALC}{separator}{SEARCH}<|eot_id|>")
    assert result.calls == [
        ToolCall("calculator", {"expression": "2+3"}, id="call_0"),
        ToolCall("search", {"query": "x", "limit": 3}, id="call_1"),
    ]
    assert result.errors == []


def test_text_around_calls_is_content(parser: Llama3JsonParser) -> None:
    result = parser.parse(f"Let me compute.\n{CALC}\nThen I answer.")
    assert [call.name for call in result.calls] == ["calculator"]
    assert result.content == "Let me compute.\nThen I answer."
    tagged = parser.parse(f"Thinking first.<|python_tag|>{CALC}; {SEARCH}\nDone.")
    assert len(tagged.calls) == 2 and tagged.content == "Thinking first.\nDone."


def test_plain_text_and_other_json_are_not_calls(parser: Llama3JsonParser) -> None:
    for text in ["The answer is 5.", 'As JSON: {"answer": 5}', "<answer>{x}</answer>"]:
        result = parser.parse(text)
        assert not result.has_calls and result.content == text


def test_braces_inside_strings(parser: Llama3JsonParser) -> None:
    text = '{"name": "python", "parameters": {"code": "d = {\\"a\\": [1, 2]}; print(\\"}\\")"}}'
    assert parser.parse(text).calls == [ToolCall("python", {"code": 'd = {"a": [1, 2]}; print("}")'}, id="call_0")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"name": "calculator", "parameters": {"expression": 2+3}}', "invalid JSON in the tool call"),
        ('{"name": \'calculator\', "parameters": {}}', "invalid JSON in the tool call"),
        ('{"parameters": {"expression": "2+3"}}', 'missing "name"'),
        ('{"name": "", "parameters": {}}', '"name" must be a non-empty string'),
        ('{"name": 7, "parameters": {}}', '"name" must be a non-empty string'),
        ('{"name": "calculator", "parameters": "2+3"}', "must be a JSON object"),
        ('{"name": "calculator", "parameters": [1]}', "must be a JSON object"),
        ('{"name": "c", "parameters": {}, "arguments": {}}', "has both 'parameters' and 'arguments'"),
        ('{"name": "calculator", "parameters": {"expression": "2+3"}', "unclosed JSON object"),
        ("<|python_tag|>calculator(2+3)", "after <|python_tag|> write each call as JSON"),
        ("<|python_tag|>[" + CALC + "]", "after <|python_tag|> write each call as JSON"),
        ('<|python_tag|>{"name": "c", "parameters": {}}; nope', None),
    ],
)
def test_malformed_calls_are_errors(parser: Llama3JsonParser, text: str, message: str | None) -> None:
    result = parser.parse(text)
    if message is None:  # a call, then text: the text is content
        assert [call.name for call in result.calls] == ["c"] and result.content == "nope"
        return
    assert result.calls == [] and result.has_calls
    assert len(result.errors) == 1 and message in result.errors[0]


def test_malformed_call_does_not_stop_the_next(parser: Llama3JsonParser) -> None:
    result = parser.parse('{"name": "a", "parameters": 3}; ' + CALC)
    assert [call.name for call in result.calls] == ["calculator"] and result.calls[0].id == "call_0"
    assert len(result.errors) == 1


def test_unknown_tool_and_wrong_types_become_observations(parser: Llama3JsonParser) -> None:
    tools = ToolRegistry([calculator])
    unknown, wrong = parser.parse(
        '{"name": "nope", "parameters": {}}; {"name": "calculator", "parameters": {"expression": 5}}'
    ).calls
    assert tools.invoke(unknown).content.startswith("Error: unknown tool 'nope'")
    assert tools.invoke(wrong).content.startswith("Error: argument 'expression' must be string")


def test_limits() -> None:
    result = Llama3JsonParser(max_calls_per_turn=1).parse(f"{CALC}; {SEARCH}")
    assert len(result.calls) == 1 and "too many tool calls" in result.errors[0]
    long = Llama3JsonParser(max_argument_chars=20).parse(CALC)
    assert long.calls == [] and "characters long" in long.errors[0]
    deep = Llama3JsonParser().parse('{"name": "x", "parameters": ' + "[" * 50_000 + "]" * 50_000 + "}")
    assert deep.calls == [] and deep.errors


@pytest.mark.parametrize("python_tag", [False, True])
def test_round_trip(python_tag: bool) -> None:
    parser = Llama3JsonParser(python_tag=python_tag)
    calls = [
        ToolCall("calculator", {"expression": "2+3"}, id="call_0"),
        ToolCall("search", {"query": 'a "quoted" {brace} ; <|eot_id|>', "n": [1, {"k": None}]}, id="call_1"),
    ]
    text = parser.format_calls(calls)
    assert text.startswith("<|python_tag|>{") if python_tag else text.startswith('{"name": "calculator", "parameters"')
    assert parser.parse(text).calls == calls
    assert parser.parse(parser.format_call(calls[0])).calls == calls[:1]
    turn = assistant_text("I will compute.", calls, parser)
    parsed = parser.parse(turn)
    assert parsed.calls == calls and parsed.content == "I will compute."
    converted = openai_messages([{"role": "assistant", "content": turn}], parser)
    assert [c["function"]["name"] for c in converted[0]["tool_calls"]] == ["calculator", "search"]


def test_results_are_bare_and_prompt_names_the_layout(parser: Llama3JsonParser) -> None:
    assert parser.wrap_observation("5") == "5" and parser.unwrap_observation("5") == "5"
    assert parser.framed_by("<|start_header_id|>ipython<|end_header_id|>\n\n\u2063TOOL_OUTPUT\u2063<|eot_id|>")
    prompt = parser.format_tools_prompt([calculator.schema()])
    assert '"name": "calculator"' in prompt and '"parameters"' in prompt
    assert parser.format_tools_prompt([]) == ""

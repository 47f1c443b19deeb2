"""The harmony (gpt-oss) parser: calls are messages addressed ``to=functions.NAME``."""

from __future__ import annotations

import pytest

from agentic_rl.parsers import PARSERS, HarmonyParser, get_parser
from agentic_rl.parsers.messages import assistant_text
from agentic_rl.tools import ToolRegistry, calculator
from agentic_rl.types import ToolCall

CALC = ToolCall("calculator", {"expression": "2+3"}, id="call_0")
SEARCH = ToolCall("search", {"query": "x", "limit": 3}, id="call_1")
ARGS = '{"expression": "2+3"}'


@pytest.fixture
def parser() -> HarmonyParser:
    return HarmonyParser()


def test_registered() -> None:
    assert PARSERS["harmony"] is HarmonyParser
    assert get_parser("harmony", max_calls_per_turn=2).call_open_tag is None  # a stream holds the whole turn


@pytest.mark.parametrize(
    "text",
    [
        f"<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{ARGS}<|call|>",
        f"<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{ARGS}",  # stop token cut off
        f"<|channel|>commentary to=functions.calculator<|constrain|>json<|message|>{ARGS}<|call|>",
        f" to=functions.calculator<|channel|>commentary json<|message|>{ARGS}<|call|>",  # recipient in the role part
        '<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>"{\\"expression\\": \\"2+3\\"}"',
    ],
)
def test_single_call_each_layout(parser: HarmonyParser, text: str) -> None:
    result = parser.parse(text)
    assert result.calls == [CALC] and result.errors == [] and result.content == ""


def test_reasoning_and_preamble_are_content(parser: HarmonyParser) -> None:
    text = (
        "<|channel|>analysis<|message|>Need the calculator.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Computing now.<|end|>"
        f"<|start|>assistant<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{ARGS}<|call|>"
    )
    result = parser.parse(text)
    assert result.calls == [CALC] and result.content == "Need the calculator.\nComputing now."
    final = parser.parse(
        "<|channel|>analysis<|message|>easy<|end|><|start|>assistant<|channel|>final<|message|>5<|return|>"
    )
    assert not final.has_calls and final.content == "easy\n5"
    assert parser.parse("plain text, no harmony").content == "plain text, no harmony"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{2+3}", "invalid JSON"),
        ('<|channel|>commentary to=functions.calculator json<|message|>"2+3"', "must be a JSON object"),
        ("<|channel|>commentary to=functions. json<|message|>{}", "missing the tool name"),
        ("<|channel|>analysis to=browser.search <|constrain|>json<|message|>{}", "call functions as to=functions.NAME"),
        (f"<|channel|>commentary to=functions.calculator json{ARGS}", "needs <|message|>"),
        ("<|channel|>commentary to=functions.c json<|message|>" + "[" * 50_000, "invalid JSON"),
    ],
)
def test_malformed_calls_are_errors(parser: HarmonyParser, text: str, message: str) -> None:
    result = HarmonyParser(max_argument_chars=10**6).parse(text)
    assert result.calls == [] and result.has_calls
    assert len(result.errors) == 1 and message in result.errors[0], result.errors


def test_unknown_tool_and_wrong_types_become_observations(parser: HarmonyParser) -> None:
    tools = ToolRegistry([calculator])
    text = (
        "<|channel|>commentary to=functions.nope json<|message|>{}<|call|><|start|>assistant"
        '<|channel|>commentary to=functions.calculator json<|message|>{"expression": 5}'
    )
    unknown, wrong = parser.parse(text).calls
    assert tools.invoke(unknown).content.startswith("Error: unknown tool 'nope'")
    assert tools.invoke(wrong).content.startswith("Error: argument 'expression' must be string")


def test_limits() -> None:
    one = "<|channel|>commentary to=functions.{} json<|message|>{{}}"
    text = "<|call|><|start|>assistant".join(one.format(name) for name in "abc")
    result = HarmonyParser(max_calls_per_turn=2).parse(text)
    assert [c.name for c in result.calls] == ["a", "b"] and "the other 1 were not executed" in result.errors[0]
    long = HarmonyParser(max_argument_chars=10).parse(HarmonyParser().format_call(CALC))
    assert long.calls == [] and "characters long" in long.errors[0]


def test_round_trip(parser: HarmonyParser) -> None:
    tricky = ToolCall(
        "search", {"query": "a<|call|><|start|>assistant to=functions.x<|message|>", "n": [1]}, id="call_1"
    )
    calls = [CALC, tricky]
    text = parser.format_calls(calls)
    assert text.startswith(f"<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>{ARGS}<|call|>")
    assert text.count("<|start|>") == 1  # the value's special-token strings are JSON escapes
    assert parser.parse(text).calls == calls
    parsed = parser.parse(assistant_text("", [CALC], parser))
    assert parsed.calls == [CALC] and parsed.content == ""


def test_results_are_bare_and_prompt_shows_the_layout(parser: HarmonyParser) -> None:
    assert parser.wrap_observation("5") == "5"
    assert parser.framed_by(
        "<|start|>functions.calculator to=assistant<|channel|>commentary<|message|>\u2063TOOL_OUTPUT\u2063<|end|>"
    )
    assert "to=functions.NAME <|constrain|>json<|message|>" in parser.format_tools_prompt([calculator.schema()])

"""The DeepSeek-V3 / R1 tool-call token parser (full-width bars, the ▁ character)."""

from __future__ import annotations

import pytest

from agentic_rl.parsers import PARSERS, DeepSeekParser, get_parser
from agentic_rl.parsers.messages import assistant_text
from agentic_rl.tools import ToolRegistry, calculator
from agentic_rl.types import ToolCall

BEGINS, ENDS = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
BEGIN, END, SEP, EOS = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>"
CALC = ToolCall("calculator", {"expression": "2+3"}, id="call_0")


def v3_call(name: str, arguments: str) -> str:
    return f"{BEGIN}function{SEP}{name}\n```json\n{arguments}\n```{END}"


@pytest.fixture
def parser() -> DeepSeekParser:
    return DeepSeekParser()


def test_token_strings() -> None:
    assert BEGINS == "<\uff5ctool\u2581calls\u2581begin\uff5c>"
    assert PARSERS["deepseek_v3"] is DeepSeekParser
    assert get_parser("deepseek_v3", max_calls_per_turn=2, max_argument_chars=100).call_open_tag == BEGINS


def test_single_call(parser: DeepSeekParser) -> None:
    call = v3_call("calculator", '{"expression": "2+3"}')
    result = parser.parse(f"{BEGINS}{call}{ENDS}{EOS}")
    assert result.calls == [CALC] and result.errors == [] and result.content == ""


def test_several_calls_with_reasoning_before(parser: DeepSeekParser) -> None:
    calls = v3_call("calculator", '{"expression": "2+3"}') + "\n" + v3_call("search", '{"query": "x"}')
    result = parser.parse(f"<think>\nI need two tools.\n</think>\n\nCalling them.{BEGINS}{calls}{ENDS}")
    assert [(c.name, c.arguments, c.id) for c in result.calls] == [
        ("calculator", {"expression": "2+3"}, "call_0"),
        ("search", {"query": "x"}, "call_1"),
    ]
    assert result.content == "<think>\nI need two tools.\n</think>\n\nCalling them."


def test_v31_layout_and_bare_json(parser: DeepSeekParser) -> None:
    result = parser.parse(f'{BEGINS}{BEGIN}calculator{SEP}{{"expression": "2+3"}}{END}{ENDS}')
    assert result.calls == [CALC]
    bare = parser.parse(f'{BEGINS}{BEGIN}function{SEP}calculator\n{{"expression": "2+3"}}{END}{ENDS}')
    assert bare.calls == [CALC]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (v3_call("calculator", '{"expression": 2+3}'), "invalid JSON in the arguments of 'calculator'"),
        (v3_call("calculator", '"2+3"'), "must be a JSON object"),
        (v3_call("", "{}"), "missing the tool name"),
        (f"{BEGIN}function calculator\n```json\n{{}}\n```{END}", f"needs {SEP}"),
        (f"{BEGIN}function{SEP}calculator\n```json\n{{}}\n{END}", "unclosed ``` fence"),
        (v3_call("calculator", "{}").replace(END, ""), f"unclosed {BEGIN}"),
    ],
)
def test_malformed_calls_are_errors(parser: DeepSeekParser, body: str, message: str) -> None:
    result = parser.parse(f"{BEGINS}{body}{ENDS}")
    assert result.calls == [] and result.has_calls
    assert len(result.errors) == 1 and message in result.errors[0], result.errors


def test_malformed_sections(parser: DeepSeekParser) -> None:
    unclosed = parser.parse(f"Text.{BEGINS}{v3_call('calculator', '{}')}")
    assert unclosed.calls == [] and f"unclosed {BEGINS}" in unclosed.errors[0] and unclosed.content == "Text."
    outside = parser.parse(f"{v3_call('calculator', '{}')}")
    assert outside.calls == [] and f"outside {BEGINS}" in outside.errors[0]
    stray = parser.parse(f"Done.{ENDS}")
    assert stray.errors and stray.content == "Done."


def test_malformed_call_does_not_stop_the_next(parser: DeepSeekParser) -> None:
    calls = v3_call("a", "{bad}") + v3_call("calculator", '{"expression": "2+3"}')
    result = parser.parse(f"{BEGINS}{calls}{ENDS}")
    assert result.calls == [CALC] and len(result.errors) == 1


def test_unknown_tool_and_wrong_types_become_observations(parser: DeepSeekParser) -> None:
    tools = ToolRegistry([calculator])
    wrong_type = v3_call("calculator", '{"expression": 5}')
    text = f"{BEGINS}{v3_call('nope', '{}')}{wrong_type}{ENDS}"
    unknown, wrong = parser.parse(text).calls
    assert tools.invoke(unknown).content.startswith("Error: unknown tool 'nope'")
    assert tools.invoke(wrong).content.startswith("Error: argument 'expression' must be string")


def test_limits() -> None:
    calls = "".join(v3_call(name, "{}") for name in "abc")
    result = DeepSeekParser(max_calls_per_turn=1).parse(f"{BEGINS}{calls}{ENDS}")
    assert [c.name for c in result.calls] == ["a"] and "the other 2 were not executed" in result.errors[0]


def test_round_trip(parser: DeepSeekParser) -> None:
    tricky = ToolCall("search", {"query": f"a {END}{ENDS} ```", "n": [1, None]}, id="call_1")
    text = parser.format_calls([CALC, tricky])
    assert text.startswith(
        f'{BEGINS}{BEGIN}function{SEP}calculator\n```json\n{{"expression": "2+3"}}\n```{END}\n{BEGIN}'
    )
    assert text.endswith(f"```{END}{ENDS}") and text.count(BEGINS) == 1
    assert parser.parse(text).calls == [CALC, tricky]
    assert parser.parse(parser.format_call(CALC)).calls == [CALC]
    parsed = parser.parse(assistant_text("<think>\nok\n</think>", [CALC, tricky], parser))
    assert parsed.calls == [CALC, tricky] and parsed.content == "<think>\nok\n</think>"


def test_results_are_bare_and_prompt_shows_the_layout(parser: DeepSeekParser) -> None:
    assert parser.wrap_observation("5") == "5"
    assert parser.framed_by(
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>\u2063TOOL_OUTPUT\u2063<｜tool▁output▁end｜>"
    )
    prompt = parser.format_tools_prompt([calculator.schema()])
    assert "### calculator" in prompt and f"{BEGINS}{BEGIN}function{SEP}NAME\n```json" in prompt

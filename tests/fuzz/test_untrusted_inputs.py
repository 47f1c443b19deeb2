"""Property-based fuzzing (hypothesis, bounded: a few hundred cases each) of the code that
reads untrusted input: the tool-call parsers (model text), the config loader (user files
and --set), the JSONL loaders and the conversation validator (user data). Only the
documented outcomes may happen: a ParseResult, ConfigError, ValueError with one line."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build
from agentic_rl.data import read_jsonl
from agentic_rl.data.conversations import validate_example
from agentic_rl.parsers import PARSERS, ParseResult, get_parser

FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

# Model text is mostly near-miss markup: fragments of every parser's syntax glued at random.
FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "<search>",
    "</search>",
    "<code>",
    "</code>",
    "```python\n",
    "```",
    '{"name": ',
    '"calculator"',
    '"arguments": ',
    "{",
    "}",
    "[",
    "]",
    '"',
    ":",
    ",",
    "\\",
    "\n",
    "null",
    "1e999",
    "NaN",
    "x" * 50,
]
model_text = st.one_of(
    st.text(max_size=400), st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=60).map("".join)
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(text=model_text)
def test_parsers_never_raise_on_model_text(name: str, text: str) -> None:
    result = get_parser(name).parse(text)
    assert isinstance(result, ParseResult)


KNOWN_KEYS = [
    "rl",
    "steps",
    "group_size",
    "optim",
    "lr",
    "algorithm",
    "preset",
    "advantage",
    "policy_loss",
    "clip_high",
    "kl",
    "coef",
    "critic",
    "reward",
    "overlong_buffer",
    "rollout",
    "temperature",
    "model",
    "name",
    "env",
    "backend",
    "kind",
    "lora",
    "r",
    "seed",
]
config_data = st.recursive(
    json_values,
    lambda children: st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=8), children, max_size=5),
    max_leaves=25,
)


@FUZZ
@given(data=st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=8), config_data, max_size=5))
def test_config_loader_raises_only_config_errors(data: dict) -> None:
    try:
        build(TrainConfig, data)
    except ConfigError as error:
        assert "\n" not in str(error).strip()  # one line


@FUZZ
@given(assignments=st.lists(st.text(max_size=40), max_size=4))
def test_set_assignments_raise_only_config_errors(assignments: list[str]) -> None:
    try:
        build(TrainConfig, apply_assignments({}, assignments))
    except ConfigError as error:
        assert "\n" not in str(error).strip()


@FUZZ
@given(
    content=st.binary(max_size=600)
    | st.lists(json_values.map(json.dumps), max_size=6).map(lambda lines: "\n".join(lines).encode())
)
def test_jsonl_loader_raises_only_value_errors(tmp_path_factory, content: bytes) -> None:
    path = tmp_path_factory.mktemp("jsonl") / "data.jsonl"
    path.write_bytes(content)
    try:
        rows = read_jsonl(path)
    except ValueError:
        return
    assert all(isinstance(row, dict) for row in rows)


@FUZZ
@given(
    example=json_values
    | st.fixed_dictionaries(
        {
            "messages": st.lists(
                st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name"]), json_values, max_size=4),
                max_size=5,
            )
        }
    )
)
def test_conversation_validator_raises_only_value_errors(example) -> None:
    try:
        validate_example(example)
    except ValueError as error:
        assert "\n" not in str(error).strip()

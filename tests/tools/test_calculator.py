"""The calculator tool: correct arithmetic, result formatting, and safety bounds."""

from __future__ import annotations

import time

import pytest

from agentic_rl.tools import calculator
from agentic_rl.types import ToolCall


def run(expression: str):
    return calculator.invoke(ToolCall(name="calculator", arguments={"expression": expression}, id="call_0"))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2+3", "5"),
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 ** 3 ** 2", "512"),  # right-associative
        ("-2 ** 2", "-4"),  # unary minus binds looser than **
        ("-(-3)", "3"),
        ("+7", "7"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("7 / 2", "3.5"),
        ("6 / 3", "2"),  # integral float shown as int
        ("7.0", "7"),
        ("2.5 * 2", "5"),
        ("0.1 + 0.2", "0.3"),  # no 0.30000000000000004
        ("1 / 3", "0.3333333333"),
        ("2 / 3", "0.6666666667"),
        ("2 ** -2", "0.25"),
        ("1e-12 * 3", "3e-12"),
        ("1.5e3", "1500"),
        ("10 ** 100", "1" + "0" * 100),
        ("  12 * 12 = ", "144"),  # surrounding whitespace and trailing "="
        ("123456789 * 987654321", "121932631112635269"),
        ("-0.0", "0"),
    ],
)
def test_results(expression: str, expected: str) -> None:
    assert calculator(expression) == expected
    result = run(expression)
    assert result.ok and not result.malformed
    assert result.content == expected


def test_schema() -> None:
    assert calculator.name == "calculator"
    assert calculator.description.startswith("Evaluate an arithmetic expression")
    assert calculator.parameters["required"] == ["expression"]
    assert calculator.parameters["properties"]["expression"]["type"] == "string"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "function calls not allowed"),
        ("os.system('ls')", "function calls not allowed"),
        ("os.system", "attribute access not allowed"),
        ("(1).__class__", "attribute access not allowed"),
        ("x + 1", "name 'x' not allowed"),
        ("pi", "name 'pi' not allowed"),
        ("[1][0]", "indexing not allowed"),
        ("[1, 2]", "lists not allowed"),
        ("1, 2", "tuples not allowed"),
        ("'a' * 3", "str constant 'a' not allowed"),
        ("lambda: 1", "lambda not allowed"),
        ("1 < 2", "comparisons not allowed"),
        ("1 and 2", "boolean operators not allowed"),
        ("True + 1", "bool constant True not allowed"),
        ("1j * 2", "complex constant 1j not allowed"),
        ("~5", "UnaryOp not allowed"),
        ("not 1", "UnaryOp not allowed"),
        ("1 << 2", "operator LShift is not allowed"),
        ("6 & 3", "operator BitAnd is not allowed"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("1.5 / 0.0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 +", "invalid syntax"),
        ("import os", "invalid syntax"),
        ("", "empty expression"),
        ("=", "empty expression"),
        ("(-8) ** 0.5", "not a real number"),
        ("1e308 * 10", "too large"),
        ("1e999", "too large"),
        ("10 ** 100 + 1", "too large"),
        ("(10 ** 60) * (10 ** 60)", "too large"),
        ("0.5 ** -1000", "exponent -1000 too large"),
        ("1" * 200, "too large"),  # a 200-digit literal
        ("1+" * 300 + "1", "expression too long (601 characters, at most 500)"),
        ("(" * 300 + "1" + ")" * 300, "too long"),
    ],
)
def test_rejected_expressions(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match="^.*" + message.replace("(", r"\(").replace(")", r"\)")):
        calculator(expression)
    result = run(expression)
    assert not result.ok
    assert not result.malformed  # a well-formed call whose evaluation failed
    assert result.content.startswith("Error: ValueError: ")
    assert message in result.content


@pytest.mark.parametrize("expression", ["2**10**10", "9**9**9**9", "10**1000", "(10**100)**100", "99**99"])
def test_huge_powers_rejected_fast(expression: str) -> None:
    start = time.perf_counter()
    result = run(expression)
    assert time.perf_counter() - start < 0.1
    assert not result.ok and "too large" in result.content


def test_deep_nesting_does_not_crash() -> None:
    result = run("-" * 490 + "1")
    assert result.ok and result.content == "1"  # 490 negations cancel out


def test_wrong_argument_type_is_malformed() -> None:
    result = calculator.invoke(ToolCall(name="calculator", arguments={"expression": 2}))
    assert not result.ok and result.malformed
    assert result.content == "Error: argument 'expression' must be string, got integer (2)"

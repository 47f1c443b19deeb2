"""A safe arithmetic calculator tool.

The expression is parsed with :mod:`ast` and evaluated by walking the tree, so only
numbers and arithmetic operators can run (never ``eval``/``exec``). Sizes are bounded
*before* computing, so hostile inputs like ``9**9**9**9`` fail in microseconds.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from agentic_rl.tools.base import tool

__all__ = ["calculator", "evaluate_expression", "MAX_EXPRESSION_CHARS", "MAX_EXPONENT", "MAX_MAGNITUDE"]

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 100
MAX_MAGNITUDE = 10**100
"""Results (and intermediate values) larger than this in magnitude are rejected."""

Number = int | float

_BINARY_OPS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_ALLOWED = "only numbers, + - * / // % ** and parentheses are allowed"


def _describe(node: ast.AST) -> str:
    """A human name for a disallowed syntax element."""
    if isinstance(node, ast.Name):
        return f"name '{node.id}'"
    if isinstance(node, ast.Constant):
        return f"{type(node.value).__name__} constant {node.value!r}"
    names = {
        ast.Call: "function calls",
        ast.Attribute: "attribute access",
        ast.Subscript: "indexing",
        ast.Compare: "comparisons",
        ast.BoolOp: "boolean operators",
        ast.Lambda: "lambda",
        ast.List: "lists",
        ast.Tuple: "tuples",
        ast.Dict: "dicts",
        ast.Set: "sets",
        ast.JoinedStr: "strings",
    }
    for kind, label in names.items():
        if isinstance(node, kind):
            return label
    return type(node).__name__


def _checked(value: Number) -> Number:
    """Reject values that are not finite reals or exceed MAX_MAGNITUDE."""
    if isinstance(value, complex):
        raise ValueError("result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("result too large")
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError("result too large (magnitude above 1e100)")
    return value


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse powers whose result would be huge, before computing them."""
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} too large (at most {MAX_EXPONENT} in magnitude)")
    if exponent > 0 and base != 0 and exponent * math.log10(abs(base)) > 101:
        raise ValueError("result too large (magnitude above 1e100)")


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            return _checked(_BINARY_OPS[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        except OverflowError:
            raise ValueError("result too large") from None
    if isinstance(node, ast.BinOp):
        raise ValueError(f"operator {type(node.op).__name__} is not allowed; {_ALLOWED}")
    raise ValueError(f"{_describe(node)} not allowed; {_ALLOWED}")


def evaluate_expression(expression: str) -> Number:
    """Evaluate an arithmetic expression safely; ValueError with a clear message otherwise."""
    text = expression.strip()
    if text.endswith("="):  # models often write "2 + 3 ="
        text = text[:-1].rstrip()
    if not text:
        raise ValueError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression too long ({len(text)} characters, at most {MAX_EXPRESSION_CHARS})")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ValueError(f"invalid syntax in expression {text!r}") from None
    try:
        return _eval(tree.body)
    except RecursionError:
        raise ValueError("expression nested too deeply") from None


def format_number(value: Number) -> str:
    """Ints as ints, integral floats as ints ("7"), others to 10 significant digits."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}"


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. (2 + 3) * 4.

    Args:
        expression: The arithmetic expression to evaluate, in Python syntax.
    """
    return format_number(evaluate_expression(expression))

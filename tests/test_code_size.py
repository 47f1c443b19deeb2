"""Small rooms: no source file over 400 lines and no function over 80 (docstrings aside).
Generated data is the one exception (search-qa's question templates); it may shrink, never
grow, and no new file may join."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "agentic_rl"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80

OVERSIZED_FILES = {
    "envs/search_data.py": 786,  # generated task templates, mostly data
}

OVERSIZED_FUNCTIONS: dict[str, int] = {}


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_no_file_grows_past_its_limit():
    over = {}
    for name, text in _sources():
        lines = len(text.splitlines())
        if lines > OVERSIZED_FILES.get(name, MAX_FILE_LINES):
            over[name] = lines
    assert not over, f"files over {MAX_FILE_LINES} lines (or past their listed size): {over}"


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines without its docstring: an env factory documents every option there."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_no_function_grows_past_its_limit():
    over = {}
    for name, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key, lines = f"{name}:{node.name}", _code_lines(node)
                if lines > OVERSIZED_FUNCTIONS.get(key, MAX_FUNCTION_LINES):
                    over[key] = lines
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (or past their listed size): {over}"

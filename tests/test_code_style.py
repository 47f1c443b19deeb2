"""The tree stays as ruff formats and lints it (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["src", "tests", "benchmarks", "examples", "docs/gen_ref.py"]


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    return [found]


def test_ruff_format_leaves_the_tree_unchanged():
    done = subprocess.run([*_ruff(), "format", "--check", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, (
        "run `ruff format src tests benchmarks examples docs/gen_ref.py`:\n" + done.stdout[-3000:]
    )


def test_ruff_lint_is_clean():
    done = subprocess.run([*_ruff(), "check", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]

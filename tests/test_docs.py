"""The documentation site builds with no warning (broken links and anchors included), its
Python blocks compile, and the README is short and links only to docs pages that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


def _python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a markdown file, snippet includes (--8<--) expanded."""
    text = path.read_text()
    return [SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), block) for block in FENCE.findall(text)]


def test_the_site_builds_strict_with_no_warning(tmp_path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert result.returncode == 0 and not warnings, "\n".join(warnings) or output[-3000:]
    for page in ("reference/cli", "reference/config", "reference/envs", "reference/algorithms", "reference/python-api"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_every_python_block_in_the_docs_and_readme_compiles() -> None:
    files = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
    count = 0
    for path in files:
        for index, block in enumerate(_python_blocks(path)):
            compile(block, f"{path.relative_to(ROOT)}[python block {index}]", "exec")
            count += 1
    assert count > 20


def test_the_reference_generator_covers_every_env_command_and_section() -> None:
    sys.path.insert(0, str(DOCS))
    try:
        import gen_ref
    finally:
        sys.path.remove(str(DOCS))
    from agentic_rl import envs
    from agentic_rl.cli import COMMANDS

    pages = gen_ref.generate()
    assert set(pages) == {f"reference/{name}.md" for name in gen_ref.PAGES}
    for entry in envs.registered():
        assert f"\n## {entry.name}\n" in pages["reference/envs.md"]
    assert len(re.findall(r"^## `agentic-rl ", pages["reference/cli.md"], re.MULTILINE)) >= len(COMMANDS)
    for key in (
        "`rollout.temperature`",
        "`algorithm.policy_loss.name`",
        "`algorithm.kl.coef`",
        "`sft.collect.source`",
        "`rl.steps`",
        "`reward.overlong_buffer`",
    ):
        assert key in pages["reference/config.md"], key
    # a registered function's parameters are documented with the function (its signature is their home)
    assert "`clip_high`" in pages["reference/algorithms.md"]


def test_the_readme_is_short_and_links_to_docs_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert links, "the README links into the docs"
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, missing


def test_the_readme_custom_env_is_the_example_file() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your own environment", 1)[1]
    shown = FENCE.search(section).group(1).strip()
    example = (ROOT / "examples" / "custom_env.py").read_text()
    body = example.split("from __future__ import annotations\n", 1)[1].split('\nif __name__ == "__main__":')[0]
    # The README leaves out what only the example's __main__ uses: train.
    assert shown == re.sub(r"(from agentic_rl import .*), train\n", r"\1\n", body).strip()

"""``agentic-rl doctor``: the table for each family's template fixture (and the docs page
that shows it), a local folder through the command line, and a missing folder."""

from __future__ import annotations

import pytest
from template_families import BY_NAME, DOCS_PAGE, FAMILIES, build_tokenizer, doctor_page

from agentic_rl.cli import main
from agentic_rl.models import load_tokenizer
from agentic_rl.templates.doctor import inspect_template, report_table


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("smollm2-135m")


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_findings_for_each_family(base, family) -> None:
    report = inspect_template(build_tokenizer(family, base))
    assert report.parser == family.parser  # the same choice as parser: auto
    assert report.renders_tools == (family.name not in ("deepseek-r1", "gemma3"))  # their templates list none
    assert report.append_only == (family.name not in ("mistral-v3", "deepseek-r1"))
    assert (report.reasoning is not None) == (family.reasoning is not None)
    if family.name == "qwen3":  # kept across tool turns, dropped once a new user message follows
        assert report.reasoning_across_tools and not report.reasoning_after_user
        assert "rollout.thinking: keep" in report.needs
    if family.name == "deepseek-r1":
        assert report.reasoning == "prompt" and not report.reasoning_across_tools
        assert "rollout.thinking: strip" in report.needs
    if family.name == "gemma3":  # prompted calls: the parser's prompt and <tool_response> frames, in user turns
        assert not report.frames_tool_output and report.turn_end == "<end_of_turn>\n"
        assert any("described by the parser's prompt" in need for need in report.needs)
    if family.name == "phi4-mini":  # the template declares tools in <|tool|>...<|/tool|> and frames results
        assert report.frames_tool_output and report.turn_end == "<|end|>"
    if family.name == "gpt-oss":  # harmony: tools in the developer message, results in functions.NAME messages
        assert report.frames_tool_output and report.reasoning is None  # its reasoning is a channel, not <think>
    if family.name == "mistral-v3":
        assert "[/INST] [TOOL_CALLS]" in report.divergence and any("template_drift_tokens" in n for n in report.needs)


def test_the_docs_page_is_the_doctors_output(base) -> None:
    assert DOCS_PAGE.read_text() == doctor_page(base), "rewrite it: python tests/templates/template_families.py"


def test_doctor_on_a_local_folder(base, tmp_path, capsys) -> None:
    tokenizer = build_tokenizer(BY_NAME["qwen3"], base)
    tokenizer.save_pretrained(tmp_path / "qwen3")
    assert main(["doctor", str(tmp_path / "qwen3")]) == 0
    out = capsys.readouterr().out
    assert out == report_table(inspect_template(tokenizer), str(tmp_path / "qwen3"))
    assert "| append-only across tool turns | yes |" in out and "rollout.thinking: keep" in out


def test_doctor_on_a_missing_folder(tmp_path, capsys) -> None:
    assert main(["doctor", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no model folder at" in err


def test_doctor_on_a_template_without_tools(capsys) -> None:
    assert main(["doctor", "smollm2-135m"]) == 0
    out = capsys.readouterr().out
    assert "| tool-call parser              | none" in out and "parser: set one" in out

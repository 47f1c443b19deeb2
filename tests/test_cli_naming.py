"""One naming scheme on the command line (``--model``, ``--output`` for a file,
``--output-dir`` for a folder, knobs through ``--set``), the old spellings kept for a
release with a one-line notice; ``recipes show``; train-agent refusing what it would
ignore; a missing optional package as one line with its ``pip install``."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from agentic_rl.cli import build_parser, main


def _flags(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, set[str]]:
    """Every (sub)command's visible option strings, by command path."""
    out = {prefix: set()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(_flags(sub, f"{prefix} {name}".strip()))
        elif action.help is not argparse.SUPPRESS:
            out[prefix] |= set(action.option_strings)
    return out


def test_every_command_spells_outputs_and_the_model_the_same_way() -> None:
    flags = _flags(build_parser())
    spelled = {flag for options in flags.values() for flag in options}
    assert not spelled & {"--out", "--output_dir", "--outdir", "--precision"}, spelled
    for command in ("collect", "eval", "sft", "dpo", "serve"):
        assert "--model" in flags[command], command
    assert "--output" in flags["data gsm8k-to-sft"] and "--output-dir" in flags["index build"]


@pytest.mark.parametrize(
    "argv, old",
    [
        (["data", "gsm8k-to-sft", "missing.jsonl", "--out", "x.jsonl"], "--out"),
        (["index", "build", "missing.jsonl", "--out", "idx"], "--out"),
        (["sft", "--data", "missing.jsonl", "--output-dir", "o", "--precision", "fp32"], "--precision"),
    ],
)
def test_an_old_spelling_still_works_with_a_one_line_notice(argv, old, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2  # parsed as before: the missing input is what fails
    notice, error = capsys.readouterr().err.splitlines()
    assert notice.startswith(f"agentic-rl: {old} is deprecated") and "use --" in notice
    assert error.startswith("agentic-rl: error:") and "missing.jsonl" in error


def test_precision_is_a_set_key_for_sft_and_dpo(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sft", "--data", "d.jsonl", "--output-dir", "o", "--set", "precision=fp16"]) == 2
    assert "precision: expected one of auto, fp32, bf16-mixed" in capsys.readouterr().err


def test_serve_takes_the_model_as_a_flag_and_the_positional_one_with_a_notice(monkeypatch, capsys) -> None:
    import agentic_rl.cli.serve as serve

    seen = []
    monkeypatch.setattr(
        serve, "_serving_backend", lambda args, name: seen.append(name) or (_ for _ in ()).throw(KeyboardInterrupt)
    )
    assert main(["serve", "--model", "tiny-random"]) == 130 and seen == ["tiny-random"]
    assert "deprecated" not in capsys.readouterr().err
    assert main(["serve", "tiny-random"]) == 130 and seen[-1] == "tiny-random"
    assert "agentic-rl: serve MODEL (positional) is deprecated" in capsys.readouterr().err


def test_recipes_show_prints_the_yaml_as_written(capsys) -> None:
    assert main(["recipes", "show", "dapo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("description:") and "base: default" in out and "agentic-rl config dapo" in out
    assert main(["recipes", "show", "dapx"]) == 2
    assert "did you mean 'dapo'?" in capsys.readouterr().err


def test_recipe_descriptions_are_one_line_claims() -> None:
    from agentic_rl.recipes import describe, recipe_names

    for name in recipe_names():
        text = describe(name)
        assert len(text) <= 220 and "Measured" not in text and not re.search(r"\d min\b", text), name


def test_the_starting_points_for_larger_models_resolve(tmp_path) -> None:
    from pathlib import Path

    from agentic_rl.config import TrainConfig, build
    from agentic_rl.recipes import load_recipe

    for path in sorted((Path(__file__).parents[1] / "examples" / "configs").glob("*.yaml")):
        assert "starting point for larger models" in path.read_text().splitlines()[0], path
        build(TrainConfig, load_recipe(str(path))[1])


@pytest.mark.parametrize(
    "setting, key",
    [
        ("backend.kind=vllm", "backend.kind"),
        ("curriculum.enabled=true", "curriculum.enabled"),
        ("distributed.rollout_workers=2", "distributed.rollout_workers"),
        ("rl.sampling=arpo", "rl.sampling"),
        ("env.name=sokoban", "env.name"),
        ("reward.terms.evidence=0.2", "reward.terms.evidence"),
    ],
)
def test_train_agent_refuses_what_it_would_ignore(setting, key, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_agent.py").write_text("def agent(task, client):\n    return ''\n")
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"q": 1}) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["train-agent", "my_agent:agent", "--tasks", "tasks.jsonl", "--output-dir", "run", "--set", setting]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"agentic-rl: error: {key}: train-agent does not use it")
    assert not (tmp_path / "run").exists()


def test_a_missing_optional_package_is_one_line_with_the_install(tmp_path, monkeypatch, capsys) -> None:
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "openai", None)  # as if not installed
    (tmp_path / "my_agent2.py").write_text("def agent(task, client):\n    return ''\n")
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"q": 1}) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train-agent", "my_agent2:agent", "--tasks", "tasks.jsonl", "--set", "model.name=tiny-random"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "pip install openai" in line and line.startswith("agentic-rl: error:")

    from agentic_rl.optional import MissingPackage, require

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingPackage, match=r"pip install 'agentic-rl\[data\]'"):
        require("datasets", "pip install 'agentic-rl[data]'", "task data through Hugging Face datasets")

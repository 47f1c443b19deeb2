"""Fifteen mistakes a newcomer makes on the command line: each ends in one line on stderr,
exit status 2, and leaves no run directory (nor any other file) behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_rl.cli import main

TINY = "model.name=tiny-random"

CASES = {
    "mistyped recipe": (["train", "defualt"], "unknown recipe 'defualt' (did you mean 'default'?)"),
    "mistyped env": (["train", "--set", "env.name=arithmetc"], "did you mean 'arithmetic'?"),
    "mistyped env option": (["train", "--set", "env.max_turn=3"], "did you mean 'max_turns'?"),
    "mistyped config key": (["train", "--set", "stepz=3"], "stepz"),
    "flat key of agentic-rl 0.1": (["train", "--set", "group_size=4"], "group_size: moved to rl.group_size"),
    "--set without '='": (["train", "--set", "rl.steps"], "KEY=VALUE"),
    "recipe YAML with a syntax error": (["train", "broken.yaml"], "invalid YAML"),
    "env import path that does not exist": (["train", "--set", "env.name=no_such_module:make_env"], "no_such_module"),
    "non-integer steps": (["train", "--set", "rl.steps=ten"], "rl.steps"),
    "missing SFT data file": (["sft", "--data", "missing.jsonl", "--output-dir", "out"], "--data"),
    "model folder without config.json": (["train", "--set", "model.name=./empty-model"], "empty-model"),
    "--nproc 0": (["train", "--nproc", "0"], "--nproc"),
    "--resume of a folder that is not a run": (["train", "--resume", "not-a-run"], "not-a-run"),
    "bad parser name": (["train", "--set", "env.parser=hermez"], "hermez"),
    "eval of a mistyped env": (["eval", "--env", "frozenlak", "--model", "tiny-random"], "did you mean 'frozenlake'?"),
    "train-agent with an agent that does not import": (
        ["train-agent", "my_agnet:agent", "--tasks", "tasks.jsonl"],
        "my_agnet",
    ),
}


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.yaml").write_text("base: default\nrl:\n  steps: [1, 2\n")
    (tmp_path / "empty-model").mkdir()
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "not-a-run" / "notes.txt").write_text("not a run\n")
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    return tmp_path


def _tree(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.mark.parametrize("case", list(CASES))
def test_a_newcomer_mistake_is_one_line_exit_2_and_nothing_written(case, workdir, capsys) -> None:
    argv, expected = CASES[case]
    if argv[0] == "train" and "--resume" not in argv and not any(arg.startswith("model.name=") for arg in argv):
        argv = [*argv, "--set", TINY]  # nothing may get as far as loading the embedded model
    before = _tree(workdir)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert expected in err and "Traceback" not in err, err
    assert _tree(workdir) == before  # no runs/ folder, no output folder, nothing

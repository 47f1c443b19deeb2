"""Checks before a run (issue 50): a failed check is one line, exit 2, and no run directory."""

from __future__ import annotations

import sys

import pytest

from agentic_rl.cli import main
from agentic_rl.config import ConfigError, TrainConfig, build
from agentic_rl.training.preflight import model_source, preflight


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_env", raising=False)  # another test's my_env.py, imported before
    yield
    assert not (tmp_path / "runs").exists(), "a check left a run directory behind"


def test_dry_run_checks_and_writes_nothing(capsys) -> None:
    assert main(["train", "--dry-run", "--set", "env.num_tasks=1100"]) == 0
    out = capsys.readouterr().out
    assert "env arithmetic: 100 training tasks (rl.task_offset 1000)" in out
    assert "model smollm2-135m: built-in" in out and "dry run: every check passed" in out


@pytest.mark.parametrize(
    "assignments, message",
    [
        (["env.name=sokoban"], "env: env 'sokoban' has no option 'operators'"),
        (["env.num_tasks=1000"], "rl.task_offset: 1000 leaves no training tasks (the env has 1000)"),
        (["model.name=nobody/no-such-model"], "model.name: 'nobody/no-such-model' is not in the Hugging Face cache"),
        (["model.name=not a model"], "model.name: 'not a model' is not a built-in name"),
    ],
)
def test_a_failed_check_is_one_line_and_exit_2(assignments, message, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = ["train", "--dry-run"]
    for assignment in assignments:
        argv += ["--set", assignment]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


NO_EXPERT = """from agentic_rl.envs import make


class NoExpert:
    def __init__(self, **options):
        self.inner = make("arithmetic", **options)

    def __getattr__(self, name):
        if name == "expert_reply":
            raise AttributeError(name)
        return getattr(self.inner, name)


def make_env(**options):
    return NoExpert(**options)
"""


def test_an_expert_cold_start_needs_an_expert(tmp_path, capsys) -> None:
    (tmp_path / "my_env.py").write_text(NO_EXPERT)
    recipe = "env:\n  name: my_env:make_env\n  num_tasks: 20\nrl:\n  task_offset: 0\nsft:\n  enabled: true\n  collect:\n    source: expert\n"
    (tmp_path / "mine.yaml").write_text(recipe)
    assert main(["train", "mine.yaml", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "sft.collect.source: 'expert' needs an env with a scripted expert (expert_reply); my_env:make_env" in err


def test_the_python_api_checks_before_it_creates_the_run(tmp_path) -> None:
    from agentic_rl import train

    with pytest.raises(ConfigError, match="leaves no training tasks"):
        train(
            {
                "env": {"name": "arithmetic", "num_tasks": 10},
                "rl": {"task_offset": 10},
                "output_dir": str(tmp_path / "runs"),
            }
        )


def test_model_sources(tmp_path, monkeypatch) -> None:
    assert model_source("smollm2-135m") == "built-in"
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(ConfigError, match="has no config.json"):
        model_source(str(folder))
    (folder / "config.json").write_text("{}")
    assert model_source(str(folder)) == "local folder"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="HF_HUB_OFFLINE is set: .*a local folder.*smollm2-135m"):
        model_source("someone/uncached")


def test_preflight_gives_the_tasks_the_run_trains_on() -> None:
    config = build(TrainConfig, {"env": {"name": "arithmetic", "num_tasks": 1010}, "rl": {"task_offset": 1000}})
    checked = preflight(config)
    assert checked.task_indices == list(range(1000, 1010)) and checked.sandbox is None
    assert checked.train_env().num_tasks == 1010

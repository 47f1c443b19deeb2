"""The listing commands print to stdout (logs and progress stay on stderr), so they pipe."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentic_rl.cli import main
from agentic_rl.recipes import recipe_names


@pytest.mark.parametrize("command, names", [("envs", ["arithmetic", "search-qa"]), ("recipes", ["default", "smoke"])])
def test_listings_go_to_stdout_one_row_per_line(command, names, capsys) -> None:
    assert main([command]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    rows = [line.split("\t") for line in out.splitlines()]
    assert all(len(row) == 2 and row[1] for row in rows), out  # name <TAB> description, piped: no header, no wrapping
    assert set(names) <= {row[0] for row in rows}
    if command == "recipes":
        assert [row[0] for row in rows] == recipe_names()


def test_listing_on_a_terminal_is_a_table_on_stdout(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["recipes"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "recipe" in out and "description" in out and "smoke" in out


def test_envs_name_shows_the_options_with_types_defaults_and_docs(capsys, tmp_path, monkeypatch) -> None:
    assert main(["envs", "frozenlake"]) == 0
    out, err = capsys.readouterr()
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines() if line.count("\t") == 3}
    assert (
        err == "" and "FrozenLake" in out and rows["size"][:2] == ["int", "4"] and rows["view"][:2] == ["str", "'grid'"]
    )
    assert all(row[2] for row in rows.values())  # every option says what it does
    assert "Args:" not in out  # the docstring's entries are the table's last column, not repeated above it
    # Your own env by import path, from the working directory, its options documented Google-style.
    (tmp_path / "listed_env.py").write_text(
        "def make_env(*, level: int = 2, name: str = 'x'):\n"
        '    """My env.\n\n    Args:\n        level: How hard,\n            1 to 3.\n    """\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    monkeypatch.setitem(sys.modules, "listed_env", None)  # imported fresh, and forgotten afterwards
    del sys.modules["listed_env"]
    assert main(["envs", "listed_env:make_env"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("My env.") and "level\tint\t2\tHow hard, 1 to 3." in out and "name\tstr\t'x'\t\n" in out


def test_a_mistyped_env_or_option_is_one_line_with_a_suggestion(capsys) -> None:
    assert main(["envs", "frozenlak"]) == 2
    assert capsys.readouterr().err.startswith("agentic-rl envs: unknown env 'frozenlak' (did you mean 'frozenlake'?)")
    from agentic_rl.envs import make

    with pytest.raises(TypeError, match=r"no option 'sizee' \(did you mean 'size'\?\)"):
        make("frozenlake", sizee=3)


def test_envs_pipes_into_grep() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [os.path.join(os.path.dirname(__file__), "..", "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    listed = subprocess.run(
        [sys.executable, "-m", "agentic_rl", "envs"], capture_output=True, text=True, env=env, timeout=120
    )
    assert listed.returncode == 0 and listed.stderr == ""
    [line] = [line for line in listed.stdout.splitlines() if line.split("\t")[0] == "arithmetic"]
    assert line.startswith("arithmetic\t") and "calculator" in line


def test_sigterm_exits_through_cleanup(tmp_path) -> None:
    """SIGTERM ends a command through its finally blocks (where managed vLLM servers and
    scratch folders are cleaned up), with exit code 143 and one line, not a silent death."""
    import signal
    import time

    marker = tmp_path / "marker"
    script = (
        "import sys, time, pathlib\n"
        "from agentic_rl import cli\n"
        "from agentic_rl.cli import listings\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "def slow(args):\n"
        "    marker.write_text('running')\n"
        "    try:\n"
        "        time.sleep(60)\n"
        "    finally:\n"
        "        marker.write_text('cleaned')\n"
        "    return 0\n"
        "listings._recipes = slow\n"
        "sys.argv = ['agentic-rl', 'recipes']\n"
        "sys.exit(cli.main())\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text() == "running") and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 143
    assert marker.read_text() == "cleaned"
    assert stderr.strip() == "agentic-rl: terminated"


def test_config_prints_the_resolved_recipe_that_builds_back_to_itself(capsys) -> None:
    import yaml

    from agentic_rl.config import TrainConfig, build
    from agentic_rl.recipes import load_recipe

    assert main(["config", "smoke", "--set", "rl.steps=3", "--set", "optim.lr=2e-6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# recipe: smoke\n")
    printed = yaml.safe_load(out)
    assert printed["rl"]["steps"] == 3 and printed["optim"]["lr"] == 2e-6 and printed["rollout"]["temperature"] == 1.0
    smoke = load_recipe("smoke")[1]
    expected = build(TrainConfig, {**smoke, "rl": {**smoke["rl"], "steps": 3}, "optim": {"lr": 2e-6}})
    assert build(TrainConfig, printed) == expected
    assert main(["config", "smoke", "--set", "rollout.temprature=1"]) == 2
    assert "did you mean 'rollout.temperature'" in capsys.readouterr().err


def test_an_env_in_the_working_directory_is_found_by_import_path(tmp_path, monkeypatch, capsys) -> None:
    import json

    (tmp_path / "my_env.py").write_text(
        "from agentic_rl import envs\n\ndef make_env(**options):\n    return envs.make('arithmetic', **options)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    argv = ["eval", "--model", "tiny-random", "--env", "my_env:make_env", "--num-tasks", "1", "--k", "1"]
    assert main([*argv, "--set", "rollout.max_new_tokens=4", "--set", "env.max_turns=1"]) == 0
    assert json.loads(capsys.readouterr().out)["avg@1"] == 0.0
    assert sys.path[-1] == str(tmp_path)  # appended: never shadows an installed package

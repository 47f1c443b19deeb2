"""``benchmarks/recipe_seeds.py``: hand-made summaries aggregate to hand values, and the
smoke recipe runs end to end through the CLI over two seeds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "recipe_seeds.py"


@pytest.fixture(scope="module")
def seeds():
    spec = importlib.util.spec_from_file_location("recipe_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _summary(before: float, sft: float, after: float, calls: float) -> dict:
    evals = {
        "before": {"avg@1": before, "tool_calls_per_episode": 0.0},
        "after_sft": {"avg@1": sft, "tool_calls_per_episode": calls},
    }
    evals["after"] = {"avg@1": after, "tool_calls_per_episode": calls, "search/em_2hop": 0.5}
    return {"evals": evals, "steps": 8}


def test_rows_aggregate_and_table_match_hand_values(seeds) -> None:
    rows = [
        seeds.seed_row(
            _summary(0.0, 0.3, 0.5, 1.0),
            ["tool_calls_per_episode", "search/em_2hop", "absent"],
            seed=0,
            wall_time_s=600.0,
        ),
        seeds.seed_row(
            _summary(0.0, 0.2, 0.6, 2.0),
            ["tool_calls_per_episode", "search/em_2hop", "absent"],
            seed=1,
            wall_time_s=660.0,
        ),
    ]
    assert rows[0]["evals"]["after"] == {"accuracy": 0.5, "tool_calls_per_episode": 1.0, "search/em_2hop": 0.5}
    assert "absent" not in rows[0]["evals"]["after"] and "search/em_2hop" not in rows[0]["evals"]["before"]
    summary = seeds.aggregate(rows)
    assert summary["after"]["accuracy"] == pytest.approx({"mean": 0.55, "std": 0.05, "min": 0.5, "max": 0.6, "n": 2})
    assert summary["after_sft"]["tool_calls_per_episode"]["mean"] == 1.5
    assert summary["run"]["wall_time_s"] == pytest.approx(
        {"mean": 630.0, "std": 30.0, "min": 600.0, "max": 660.0, "n": 2}
    )
    table = seeds.markdown("search-qa", rows, summary)
    assert "| after | accuracy | 0.500 | 0.600 | 0.550 (0.500–0.600) |" in table
    assert "| run | wall time (min) | 10.0 | 11.0 | 10.5 (10.0–11.0) |" in table
    assert "after_sft − before = +0.250; after − after_sft = +0.300" in table


def test_bad_arguments_are_one_line_errors(seeds, capsys) -> None:
    for argv, message in (
        (["smoke", "--seeds", "1,1"], "--seeds: expected distinct"),
        (["smoke", "--set", "rl.steps"], "--set: expected KEY=VALUE"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            seeds.parse_args(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_recipe_over_two_seeds_through_the_cli(seeds, tmp_path) -> None:
    out = tmp_path / "seeds"
    assert (
        seeds.main(
            ["smoke", "--seeds", "0,1", "--set", "rl.steps=1", "--set", "eval.num_tasks=2", "--output-dir", str(out)]
        )
        == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert [row["seed"] for row in results["rows"]] == [0, 1]
    for row in results["rows"]:
        assert set(row["evals"]) == {"before", "after"} and row["steps"] == 1 and row["wall_time_s"] > 0
        config = (out / f"seed{row['seed']}" / "config.yaml").read_text()
        assert f"seed: {row['seed']}" in config
    assert results["aggregate"]["after"]["accuracy"]["n"] == 2
    assert "| before | accuracy |" in (out / "results.md").read_text()

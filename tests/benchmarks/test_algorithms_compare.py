"""``benchmarks/algorithms_compare.py`` end to end on the tiny model: every algorithm on every
seed, the aggregates over seeds, the table and the plot."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "algorithms_compare.py"
SMALLEST = [
    "--model",
    "tiny-random",
    "--steps",
    "1",
    "--tasks-per-step",
    "2",
    "--group-size",
    "2",
    "--eval-tasks",
    "2",
    "--max-new-tokens",
    "8",
]


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("algorithms_compare", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wiring_mode_runs_every_algorithm_on_every_seed(compare, tmp_path) -> None:
    out = tmp_path / "compare"
    argv = [
        *SMALLEST,
        "--no-sft",
        "--algorithms",
        "grpo-t,gspo",
        "--seeds",
        "0,1",
        "--mini-batches",
        "1",
        "--output-dir",
        str(out),
    ]
    assert compare.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    rows = results["rows"]
    assert sorted((row["algorithm"], row["seed"]) for row in rows) == [
        ("grpo-t", 0),
        ("grpo-t", 1),
        ("gspo", 0),
        ("gspo", 1),
    ]
    assert {row["preset"] for row in rows} == {"grpo-t", "gspo"}
    for row in rows:
        assert row["gain"] == pytest.approx(row["accuracy_after"] - row["accuracy_before_rl"])
        # The random model solves nothing: every advantage is 0, the update trains on no
        # episode (skip_zero_advantage); entropy still comes from a gradient-free forward.
        assert len(row["curve"]["accuracy"]) == 1 and row["rl_time_s"] > 0 and row["entropy_mean"] > 0
        assert row["groups_sampled_per_step"] == 2.0
    assert [start["start_model"] for start in results["starts"]] == ["tiny-random", "tiny-random"]
    assert results["shared"]["rl"]["mini_batches"] == 1 and results["shared"]["rl"]["steps"] == 1
    # gspo's recipe takes 4 mini-batches; the comparison names it and runs the shared value.
    assert results["departures"] == {"grpo-t": [], "gspo": ["rl.mini_batches 4 (default recipe 2)"]}
    aggregates = results["aggregates"]
    assert list(aggregates) == ["grpo-t", "gspo"]
    for label, summary in aggregates.items():
        mine = [row for row in rows if row["algorithm"] == label]
        assert summary["seeds"] == [0, 1]
        assert summary["entropy_mean"]["mean"] == pytest.approx(statistics.fmean(row["entropy_mean"] for row in mine))
        for key in ("accuracy_after", "rl_time_s"):
            values = [row[key] for row in mine]
            assert summary[key]["mean"] == pytest.approx(statistics.fmean(values))
            assert (summary[key]["min"], summary[key]["max"]) == (min(values), max(values))
        assert len(summary["curve"]["entropy"]) == 1 and summary["curve"]["entropy"][0] > 0
    table = (out / "results.md").read_text()
    assert "gspo: its recipe (gspo) sets rl.mini_batches 4 (default recipe 2)" in table
    assert sum(line.startswith(("| grpo-t | 2 |", "| gspo | 2 |")) for line in table.splitlines()) == 2
    assert (
        sum(
            line.startswith(("| grpo-t | 0 |", "| grpo-t | 1 |", "| gspo | 0 |", "| gspo | 1 |"))
            for line in table.splitlines()
        )
        == 4
    )
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match=f"--output-dir: {out / 'seed0'} already holds runs; choose another directory"):
        compare.main(argv)  # refused before any run, results kept
    assert json.loads((out / "results.json").read_text())["rows"] == rows


def test_cold_start_is_the_default_recipes_sft_stage_once_per_seed(compare, tmp_path) -> None:
    out = tmp_path / "compare"
    argv = [
        *SMALLEST,
        "--sft-source",
        "expert",
        "--sft-tasks",
        "4",
        "--algorithms",
        "cispo",
        "--seeds",
        "3",
        "--output-dir",
        str(out),
    ]
    assert compare.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    start_run = out / "seed3" / "start"
    (start,), (row,) = results["starts"], results["rows"]
    assert start["cold_start"] and start["sft_collect_source"] == "expert"
    assert start["start_model"] == str(start_run / "final") and (start_run / "final" / "config.json").is_file()
    assert len((start_run / "sft_data.jsonl").read_text().splitlines()) == 4  # the expert solves all 4 tasks
    after_sft = json.loads((start_run / "eval_after_sft.json").read_text())["metrics"]["avg@1"]
    base = json.loads((start_run / "eval_before.json").read_text())["metrics"]["avg@1"]
    assert (row["accuracy_base"], row["accuracy_before_rl"]) == (base, after_sft)
    assert not (out / "seed3" / "cispo" / "eval_before.json").exists()  # the start is evaluated once, in the start run
    assert "sft.collect.source expert, 4 tasks" in (out / "results.md").read_text()


def test_unknown_algorithm_is_a_one_line_error(compare, capsys) -> None:
    with pytest.raises(SystemExit) as error:
        compare.parse_args(["--algorithms", "grpo-t,grpo-x"])
    assert error.value.code == 2
    assert (
        "--algorithms: expected labels out of grpo-t, grpo-tcr, dapo, gspo, cispo, ppo, arpo, got 'grpo-t,grpo-x'"
        in capsys.readouterr().err
    )

"""A recipe's claim over several seeds: ``agentic-rl train RECIPE`` once per seed, as a user
runs it (its own process, the recipe's every stage), then the held-out figures of every
evaluation the run made (before, after SFT, after RL...) per seed, their mean and min-max,
and each run's wall time.

    python benchmarks/recipe_seeds.py default --seeds 0,1,2
    python benchmarks/recipe_seeds.py search-qa --seeds 0,1,2 --metrics search/em_1hop,search/em_2hop,search/searches
    python benchmarks/recipe_seeds.py smoke --seeds 0,1 --set rl.steps=1 --output-dir /tmp/seeds-wiring   # wiring check

A seed sets ``seed`` and ``sft.train.seed`` (the SFT shuffling seed): rollouts, RL sampling
and the cold start's order vary, the held-out tasks do not (every run evaluates the same
first ``eval.num_tasks`` test tasks). ``--set`` passes overrides to every run, as
``agentic-rl train --set`` does.

Writes into ``--output-dir``: one run folder per seed (``seed<N>``, the CLI's full output:
report, metrics, final model), ``results.json`` (per-seed figures and aggregates; rewritten
after every run, so a stopped sweep keeps what finished) and ``results.md`` (the table).
The held-out figure is ``avg@k`` of each evaluation (accuracy, or exact match for QA envs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_METRICS = ("tool_calls_per_episode",)
"""Evaluation metrics reported beside accuracy unless ``--metrics`` says otherwise."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", help="a built-in recipe name or a recipe YAML path")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated distinct seeds (default 0,1,2)")
    parser.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help="comma-separated evaluation metrics shown beside accuracy (default tool_calls_per_episode)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override for every run (repeatable)",
    )
    parser.add_argument("--output-dir", help="where runs and results go (default runs/seeds-<recipe>)")
    args = parser.parse_args(argv)
    try:
        args.seed_list = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
    except ValueError:
        parser.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    if not args.seed_list or len(set(args.seed_list)) != len(args.seed_list):
        parser.error(f"--seeds: expected distinct comma-separated integers, got {args.seeds!r}")
    args.metric_list = [name.strip() for name in args.metrics.split(",") if name.strip()]
    for override in args.overrides:
        if "=" not in override:
            parser.error(f"--set: expected KEY=VALUE, got {override!r}")
    args.output = Path(args.output_dir or f"runs/seeds-{Path(args.recipe).stem}")
    return args


def train_command(args: argparse.Namespace, seed: int, folder: Path) -> list[str]:
    """The ``agentic-rl train`` command line of one seed."""
    command = [sys.executable, "-m", "agentic_rl", "train", args.recipe, "--output-dir", str(folder)]
    for override in [*args.overrides, f"seed={seed}", f"sft.train.seed={seed}"]:
        command += ["--set", override]
    return command


def seed_row(summary: dict[str, Any], metrics: list[str], *, seed: int, wall_time_s: float) -> dict[str, Any]:
    """One seed's figures from its run's ``summary.json``: per evaluation label, ``accuracy``
    (``avg@k``) and the requested metrics (missing ones left out)."""
    evals: dict[str, dict[str, float]] = {}
    for label, values in summary["evals"].items():
        accuracy = next((value for key, value in values.items() if key.startswith("avg@")), None)
        evals[label] = {"accuracy": accuracy, **{name: values[name] for name in metrics if name in values}}
    return {"seed": seed, "steps": summary.get("steps", 0), "wall_time_s": wall_time_s, "evals": evals}


def aggregate(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per evaluation label and figure: mean, std (population), min, max over the seeds
    that have it; plus ``wall_time_s`` under the label ``run``."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    labels = [label for row in rows for label in row["evals"]]
    for label in dict.fromkeys(labels):
        names = dict.fromkeys(name for row in rows for name in row["evals"].get(label, {}))
        for name in names:
            values = [
                row["evals"][label][name]
                for row in rows
                if label in row["evals"] and row["evals"][label].get(name) is not None
            ]
            if values:
                out.setdefault(label, {})[name] = _stats(values)
    out["run"] = {"wall_time_s": _stats([row["wall_time_s"] for row in rows])}
    return out


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def markdown(recipe: str, rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    """The table: a row per evaluation and figure, a column per seed, then mean (min-max)."""
    seeds = [row["seed"] for row in rows]
    lines = [
        f"# `{recipe}` over seeds {', '.join(map(str, seeds))}",
        "",
        "| evaluation | figure | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean (min–max) |",
        "|---|---|" + "---:|" * (len(seeds) + 1),
    ]
    for label, figures in summary.items():
        if label == "run":
            continue
        for name, stats in figures.items():
            cells = [_cell(row["evals"].get(label, {}).get(name)) for row in rows]
            lines.append(
                f"| {label} | {name} | "
                + " | ".join(cells)
                + f" | {_cell(stats['mean'])} ({_cell(stats['min'])}–{_cell(stats['max'])}) |"
            )
    wall = summary["run"]["wall_time_s"]
    cells = [f"{row['wall_time_s'] / 60:.1f}" for row in rows]
    lines.append(
        "| run | wall time (min) | "
        + " | ".join(cells)
        + f" | {wall['mean'] / 60:.1f} ({wall['min'] / 60:.1f}–{wall['max'] / 60:.1f}) |"
    )
    gains = _gains(summary)
    if gains:
        lines += ["", "Gains of the mean accuracy: " + "; ".join(gains) + "."]
    return "\n".join(lines) + "\n"


def _gains(summary: dict[str, Any]) -> list[str]:
    """``after_sft - before``, ``after - after_sft`` (whichever evaluations exist, in run order)."""
    labels = [label for label in summary if label != "run" and "accuracy" in summary[label]]
    return [
        f"{later} − {earlier} = {summary[later]['accuracy']['mean'] - summary[earlier]['accuracy']['mean']:+.3f}"
        for earlier, later in zip(labels, labels[1:])
    ]


def _cell(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for seed in args.seed_list:
        folder = args.output / f"seed{seed}"
        command = train_command(args, seed, folder)
        print(f"[seed {seed}] {' '.join(command[2:])}", flush=True)
        start = time.perf_counter()
        completed = subprocess.run(command, env=environment)
        wall = time.perf_counter() - start
        if completed.returncode != 0:
            print(
                f"[seed {seed}] agentic-rl train exited with {completed.returncode}; see the output above",
                file=sys.stderr,
            )
            return completed.returncode
        rows.append(
            seed_row(json.loads((folder / "summary.json").read_text()), args.metric_list, seed=seed, wall_time_s=wall)
        )
        summary = aggregate(rows)
        (args.output / "results.json").write_text(
            json.dumps(
                {"recipe": args.recipe, "overrides": args.overrides, "rows": rows, "aggregate": summary}, indent=2
            )
        )
        (args.output / "results.md").write_text(markdown(args.recipe, rows, summary))
        print(f"[seed {seed}] done in {wall / 60:.1f} min", flush=True)
    print((args.output / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

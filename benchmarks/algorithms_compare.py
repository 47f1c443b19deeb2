"""Compare RL algorithms on the default recipe's task from the same SFT checkpoint per seed:
held-out accuracy before and after RL, tool calls, policy entropy and RL wall time.

Algorithms (``--algorithms``, default grpo-t,grpo-tcr,dapo,gspo,cispo,ppo; arpo on request)
map to a built-in recipe plus overrides (``ALGORITHMS``): grpo-tcr is the ``default``
recipe, grpo-t the ``default`` recipe with ``algorithm: {preset: grpo-t}`` (it has a preset
but no recipe of its own), the others their recipe of the same name. Each keeps what its
recipe sets outside ``SHARED``: its ``algorithm`` section (preset, PPO's critic settings),
the reward shaping its preset sets (``reward.overlong_buffer``, ``reward.tool_turn_reward``)
and how it samples (DAPO's ``rl.max_generation_rounds``, ARPO's ``rl.sampling`` and ``rl.arpo``).

Shared budget: every algorithm trains with the same ``SHARED`` settings, taken from the
``default`` recipe unless given here: task (env, reward, held-out eval), rollout
sampling, ``rl.steps``, ``rl.tasks_per_step``, ``rl.group_size``, ``rl.epochs``,
``rl.mini_batches``, optimizer (learning rate), precision, ``rl.task_offset``. Where a recipe
deliberately differs, the shared value wins and the results name the difference
(``rl.mini_batches 4 (default recipe 2)``): the ``gspo`` recipe takes 4 mini-batches per step
(the paper's), here it gets the default recipe's 2, the same number of optimizer updates
as everyone (with 2 its clip acts on the second update; ``--algorithms gspo
--mini-batches 4`` runs it as shipped). DAPO's dynamic sampling may sample up to
``rl.max_generation_rounds`` times the groups per step: that is the algorithm, so it is kept,
and the table reports the groups sampled per step beside the time.

Seeds (``--seeds 0,1,2``): per seed, one cold-start run of the ``default`` recipe through
the pipeline's own stages (``train(..., stages=("eval_before", "sft", "eval_after_sft",
"final"))``: the base model's held-out accuracy, SFT exactly as the recipe's ``sft`` section
says, model or expert collection alike, its held-out accuracy, the float32 weights), then
every algorithm's RL run from that checkpoint (``stages=("rl", "eval_after")``). The seed
sets ``seed`` and ``sft.train.seed`` (the recipe's SFT shuffling seed; equal for seed 0);
the held-out tasks are the first ``eval.num_tasks`` of the test split for every seed
(greedy), so seeds vary training, not the test set. ``--sft-checkpoint`` starts every seed
from one given model; ``--no-sft`` from the base model itself (wiring checks).

    python benchmarks/algorithms_compare.py                         # the default recipe's sizes, 6 x 3 runs
    python benchmarks/algorithms_compare.py --model tiny-random --no-sft --algorithms grpo-t,cispo \\
        --seeds 0,1 --steps 1 --tasks-per-step 2 --group-size 2 --mini-batches 1 \\
        --eval-tasks 2 --max-new-tokens 8                             # wiring check, seconds

Writes into ``--output-dir``: ``results.json`` (settings, per-seed rows with each run's
training curve, per-algorithm aggregates; rewritten after every run, so a stopped
comparison keeps what finished), ``results.md`` (the table: mean over seeds and min-max)
and ``results.png`` (held-out accuracy after SFT and after RL per seed and mean; training
accuracy per step, mean over seeds). Training accuracy, not reward, is plotted: the
presets shape rewards differently (overlong penalties), accuracy means the same for all.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

ALGORITHMS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo-t": ("default", {"algorithm": {"preset": "grpo-t"}}),
    "grpo-tcr": ("default", {}),
    "dapo": ("dapo", {}),
    "gspo": ("gspo", {}),
    "cispo": ("cispo", {}),
    "ppo": ("ppo", {}),
    "arpo": ("arpo", {}),
}
"""Table label -> (built-in recipe, overrides deep-merged over it)."""

DEFAULT_ALGORITHMS = ("grpo-t", "grpo-tcr", "dapo", "gspo", "cispo", "ppo")

SHARED = (
    "env",
    "reward",
    "eval",
    "rollout",
    "optim",
    "precision",
    "rl.steps",
    "rl.tasks_per_step",
    "rl.group_size",
    "rl.epochs",
    "rl.mini_batches",
    "rl.task_offset",
)
"""Config keys (dotted: a section or one key of it) every algorithm takes from the default
recipe (after the command line's overrides), less what an algorithm preset sets in them
(``preset_owned``)."""

AGGREGATED = (
    "accuracy_before_rl",
    "accuracy_after",
    "gain",
    "eval_tool_calls_per_episode",
    "entropy_mean",
    "train_accuracy_mean",
    "groups_sampled_per_step",
    "rl_time_s",
    "wall_time_s",
)
"""Per-seed row fields summarised per algorithm (mean, std, min, max over seeds)."""

START_STAGES_SFT = ("eval_before", "sft", "eval_after_sft", "final")
START_STAGES_NO_SFT = ("eval_before",)
RL_STAGES = ("rl", "eval_after")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    recipe = "(default: the default recipe's)"
    parser.add_argument(
        "--algorithms",
        default=",".join(DEFAULT_ALGORITHMS),
        help=f"comma-separated labels of {', '.join(ALGORITHMS)} (default {','.join(DEFAULT_ALGORITHMS)})",
    )
    parser.add_argument(
        "--seeds", default="0,1,2", help="comma-separated seeds; every algorithm runs on every seed (default 0,1,2)"
    )
    parser.add_argument("--model", help=f"base model {recipe}")
    parser.add_argument("--steps", type=int, help=f"RL steps {recipe}")
    parser.add_argument("--tasks-per-step", type=int, help=f"tasks per RL step {recipe}")
    parser.add_argument("--group-size", type=int, help=f"samples per task, ARPO's budget M {recipe}")
    parser.add_argument("--mini-batches", type=int, help=f"optimizer updates per step, for every algorithm {recipe}")
    parser.add_argument("--lr", type=float, help=f"RL learning rate {recipe}")
    parser.add_argument("--eval-tasks", type=int, help=f"held-out tasks, greedy {recipe}")
    parser.add_argument("--max-new-tokens", type=int, help=f"tokens per turn {recipe}")
    parser.add_argument("--sft-tasks", type=int, help=f"cold-start collection tasks, sft.collect.num_tasks {recipe}")
    parser.add_argument(
        "--sft-source", choices=("model", "expert"), help=f"cold-start data, sft.collect.source {recipe}"
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--sft-checkpoint", help="start every seed's algorithms from this model folder (no cold start)")
    start.add_argument("--no-sft", action="store_true", help="start from the base model itself (wiring checks)")
    parser.add_argument("--output-dir", default="runs/algorithms-compare", help="where runs and results go")
    args = parser.parse_args(argv)
    args.algorithm_labels = [label.strip() for label in args.algorithms.split(",") if label.strip()]
    unknown = [label for label in args.algorithm_labels if label not in ALGORITHMS]
    if unknown or not args.algorithm_labels:
        parser.error(f"--algorithms: expected labels out of {', '.join(ALGORITHMS)}, got {args.algorithms!r}")
    try:
        args.seed_list = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
    except ValueError:
        parser.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    if not args.seed_list or len(set(args.seed_list)) != len(args.seed_list):
        parser.error(f"--seeds: expected distinct comma-separated integers, got {args.seeds!r}")
    return args


# --- configs -------------------------------------------------------------------------


def base_recipe(args: argparse.Namespace) -> dict[str, Any]:
    """The default recipe with the command line's overrides: the source of every shared setting."""
    from agentic_rl.recipes import deep_merge, load_recipe

    _, recipe = load_recipe("default")
    overrides: dict[str, Any] = {}
    nested = {
        ("rl", "steps"): args.steps,
        ("rl", "tasks_per_step"): args.tasks_per_step,
        ("rl", "group_size"): args.group_size,
        ("rl", "mini_batches"): args.mini_batches,
        ("model", "name"): args.model,
        ("optim", "lr"): args.lr,
        ("eval", "num_tasks"): args.eval_tasks,
        ("rollout", "max_new_tokens"): args.max_new_tokens,
        ("sft", "collect", "num_tasks"): args.sft_tasks,
        ("sft", "collect", "source"): args.sft_source,
    }
    for path, value in nested.items():
        if value is not None:
            target = overrides
            for part in path[:-1]:
                target = target.setdefault(part, {})
            target[path[-1]] = value
    return deep_merge(recipe, overrides)


def preset_owned() -> set[str]:
    """Dotted keys an algorithm preset sets outside its ``algorithm`` section
    (``reward.overlong_buffer``, ``rl.max_generation_rounds``, ...): part of the algorithm,
    so never shared, each algorithm keeps its own."""
    from agentic_rl.algorithms import PRESETS

    return {
        f"{section}.{key}"
        for preset in PRESETS.values()
        for section, values in preset.items()
        if section != "algorithm"
        for key in values
    }


def _get(config: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        config = config[part]
    return config


def shared_settings(base: dict[str, Any]) -> dict[str, Any]:
    """The ``SHARED`` sections and values of the base recipe, complete (defaults filled in),
    nested as in a recipe (``{"rl": {"steps": 8, ...}, ...}``), without ``preset_owned``."""
    from agentic_rl.config import TrainConfig, build

    dumped = build(TrainConfig, base).model_dump(mode="json")
    owned = preset_owned()
    shared: dict[str, Any] = {}
    for key in SHARED:
        *sections, name = key.split(".")
        target = shared
        for section in sections:
            target = target.setdefault(section, {})
        value = _get(dumped, key)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if f"{key}.{k}" not in owned}
        target[name] = value
    return shared


def algorithm_recipe(
    label: str, shared: dict[str, Any], default_shared: dict[str, Any]
) -> tuple[str, dict[str, Any], list[str]]:
    """(recipe name, the recipe this comparison runs, where the recipe deliberately departs
    from the default recipe in a shared setting: ``["rl.mini_batches 4 (default recipe 2)"]``;
    the shared value replaces it)."""
    from agentic_rl.config import TrainConfig, build
    from agentic_rl.recipes import deep_merge, load_recipe

    recipe_name, overrides = ALGORITHMS[label]
    recipe = deep_merge(load_recipe(recipe_name)[1], overrides)
    own = _flat(build(TrainConfig, recipe).model_dump(mode="json"))
    default = _flat(default_shared)
    departs = [
        f"{key} {_short(own[key])} (default recipe {_short(value)})"
        for key, value in default.items()
        if own[key] != value
    ]
    recipe = deep_merge(recipe, shared)
    rl = recipe["rl"]
    if "arpo" in rl and rl["arpo"].get("initial_samples", 0) > rl["group_size"]:
        departs.append(
            f"rl.arpo.initial_samples {rl['arpo']['initial_samples']} (more than rl.group_size {rl['group_size']}: lowered to it)"
        )
        recipe["rl"] = {**rl, "arpo": {**rl["arpo"], "initial_samples": rl["group_size"]}}
    return recipe_name, recipe, departs


def _flat(config: dict[str, Any]) -> dict[str, Any]:
    """The ``SHARED`` values of a config (dumped, or ``shared_settings``), keyed by dotted
    name, one level of sections flattened (``optim.lr``, ``rl.mini_batches``)."""
    flat: dict[str, Any] = {}
    for key in SHARED:
        value = _get(config, key)
        if isinstance(value, dict):
            flat.update({f"{key}.{name}": item for name, item in value.items()})
        else:
            flat[key] = value
    return flat


def _short(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _run_settings(recipe: dict[str, Any], *, model: str, seed: int, folder: Path) -> dict[str, Any]:
    """What every run of the comparison sets: start model, seed, no sinks, report or checkpoints."""
    from agentic_rl.recipes import deep_merge

    return deep_merge(
        recipe,
        {
            "model": {"name": model},
            "seed": seed,
            "tracking": {"sinks": [], "report": False},
            "checkpoint_every": 0,
            "output_dir": str(folder),
        },
    )


def _events(prefix: str):
    from agentic_rl.training.pipeline import RunEvents

    def on_step(metrics: dict[str, float]) -> None:
        print(
            f"  [{prefix}] step {int(metrics['step']) + 1}: accuracy {metrics.get('accuracy', float('nan')):.2f} entropy {metrics.get('entropy', float('nan')):.3f} ({metrics.get('step_time_s', 0.0):.0f} s)",
            flush=True,
        )

    return RunEvents(on_stage=lambda message: print(f"  [{prefix}] {message}", flush=True), on_step=on_step)


# --- runs ----------------------------------------------------------------------------


def start_run(base: dict[str, Any], args: argparse.Namespace, seed: int, folder: Path) -> dict[str, Any]:
    """The seed's start: the default recipe's cold start (or the given / base model) and its
    held-out accuracy. Returns the start model's path and the evaluations."""
    from agentic_rl.config import TrainConfig, build
    from agentic_rl.recipes import deep_merge
    from agentic_rl.training.pipeline import train

    config = build(TrainConfig, base)
    cold_start = config.sft.enabled and not args.no_sft and not args.sft_checkpoint
    model = args.sft_checkpoint or config.model.name
    recipe = _run_settings(base, model=model, seed=seed, folder=folder)
    if cold_start:  # the SFT shuffle follows the seed too; the pipeline hands RL float32 weights, so does final/
        recipe = deep_merge(recipe, {"sft": {"train": {"seed": seed}}, "final_dtype": "fp32"})
    else:
        recipe = deep_merge(recipe, {"sft": {"enabled": False}})
    started = time.monotonic()
    result = train(
        recipe,
        name="default",
        events=_events(f"seed {seed} start"),
        stages=START_STAGES_SFT if cold_start else START_STAGES_NO_SFT,
    )
    wall = time.monotonic() - started
    before = result.evals["after_sft"] if cold_start else result.evals["before"]
    return {
        "seed": seed,
        "start_model": str(result.run_dir / "final") if cold_start else model,
        "cold_start": cold_start,
        "sft_collect_source": config.sft.collect.source if cold_start else None,
        "accuracy_base": result.evals["before"]["avg@1"],
        "accuracy_before_rl": before["avg@1"],
        "eval_tool_calls_before_rl": before["tool_calls_per_episode"],
        "wall_time_s": wall,
        "run_dir": str(result.run_dir),
    }


def run_algorithm(label: str, recipe: dict[str, Any], start: dict[str, Any], folder: Path) -> dict[str, Any]:
    """One algorithm's RL run from the seed's start model, and its per-seed row."""
    from agentic_rl.training.pipeline import train

    seed = start["seed"]
    config = _run_settings(recipe, model=start["start_model"], seed=seed, folder=folder)
    config["sft"] = {"enabled": False}
    started = time.monotonic()
    result = train(config, name=ALGORITHMS[label][0], events=_events(f"seed {seed} {label}"), stages=RL_STAGES)
    wall = time.monotonic() - started
    steps = result.steps

    def mean(key: str) -> float | None:
        values = [s[key] for s in steps if key in s]
        return sum(values) / len(values) if values else None

    per_episode = mean("tool_calls_per_episode")
    # Tool calls the policy made per task while training; ARPO counts a shared prefix's calls once.
    per_task = mean("arpo/tool_calls_per_task")
    if per_task is None and per_episode is not None:
        per_task = per_episode * recipe["rl"]["group_size"]
    after = result.evals["after"]
    return {
        "algorithm": label,
        "recipe": ALGORITHMS[label][0],
        "preset": recipe.get("algorithm", {}).get("preset"),
        "seed": seed,
        "accuracy_base": start["accuracy_base"],
        "accuracy_before_rl": start["accuracy_before_rl"],
        "accuracy_after": after["avg@1"],
        "gain": after["avg@1"] - start["accuracy_before_rl"],
        "eval_tool_calls_before_rl": start["eval_tool_calls_before_rl"],
        "eval_tool_calls_per_episode": after["tool_calls_per_episode"],
        "entropy_mean": mean("entropy"),
        "train_accuracy_mean": mean("accuracy"),
        "train_reward_mean": mean("reward_mean"),
        "train_tool_calls_per_episode": per_episode,
        "train_tool_calls_per_task": per_task,
        # DAPO's dynamic sampling samples more groups than rl.tasks_per_step; the others sample rl.tasks_per_step.
        "groups_sampled_per_step": mean("groups_sampled") or float(recipe["rl"]["tasks_per_step"]),
        "rl_time_s": sum(s.get("step_time_s", 0.0) for s in steps),
        "wall_time_s": wall,
        "curve": {key: [s.get(key) for s in steps] for key in ("accuracy", "reward_mean", "entropy")},
        "run_dir": str(result.run_dir),
    }


# --- results -------------------------------------------------------------------------


def aggregate(rows: list[dict[str, Any]], labels: list[str]) -> dict[str, dict[str, Any]]:
    """Per algorithm: the seeds it ran on and mean / std (sample, 0 for one seed) / min / max
    over seeds of every ``AGGREGATED`` field, and its mean training curves."""
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        mine = [row for row in rows if row["algorithm"] == label]
        if not mine:
            continue
        summary: dict[str, Any] = {"seeds": [row["seed"] for row in mine]}
        for key in AGGREGATED:
            values = [row[key] for row in mine if row[key] is not None]
            summary[key] = (
                None
                if not values
                else {
                    "mean": statistics.fmean(values),
                    "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                    "min": min(values),
                    "max": max(values),
                }
            )
        summary["curve"] = {
            key: _mean_curve([row["curve"][key] for row in mine]) for key in ("accuracy", "reward_mean", "entropy")
        }
        out[label] = summary
    return out


def _mean_curve(curves: list[list[float | None]]) -> list[float | None]:
    length = max((len(c) for c in curves), default=0)
    points = [[c[i] for c in curves if i < len(c) and c[i] is not None] for i in range(length)]
    return [statistics.fmean(p) if p else None for p in points]


def markdown(aggregates: dict[str, dict[str, Any]], rows: list[dict[str, Any]], settings: list[str]) -> str:
    def cell(stats: dict[str, float] | None, digits: int) -> str:
        if stats is None:
            return "-"
        low, high = f"{stats['min']:.{digits}f}", f"{stats['max']:.{digits}f}"
        return f"{stats['mean']:.{digits}f}" + ("" if low == high else f" ({low}–{high})")

    columns = (
        ("held-out acc before RL", "accuracy_before_rl", 3),
        ("held-out acc after RL", "accuracy_after", 3),
        ("gain", "gain", 3),
        ("eval tool calls / episode", "eval_tool_calls_per_episode", 2),
        ("policy entropy (mean over steps)", "entropy_mean", 3),
        ("train acc (mean over steps)", "train_accuracy_mean", 3),
        ("groups sampled / step", "groups_sampled_per_step", 1),
        ("RL time (s)", "rl_time_s", 0),
    )
    lines = [*settings, "", "Mean over seeds (min–max over seeds in brackets).", ""]
    lines.append("| algorithm | seeds | " + " | ".join(title for title, _, _ in columns) + " |")
    lines.append("|---|---|" + "---|" * len(columns))
    for label, summary in aggregates.items():
        lines.append(
            f"| {label} | {len(summary['seeds'])} | "
            + " | ".join(cell(summary[key], digits) for _, key, digits in columns)
            + " |"
        )
    lines += [
        "",
        "Per seed:",
        "",
        "| algorithm | seed | base acc | acc before RL | acc after RL | eval tool calls / episode | entropy | RL time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        entropy = "-" if row["entropy_mean"] is None else f"{row['entropy_mean']:.3f}"
        lines.append(
            f"| {row['algorithm']} | {row['seed']} | {row['accuracy_base']:.3f} | {row['accuracy_before_rl']:.3f} | {row['accuracy_after']:.3f} "
            f"| {row['eval_tool_calls_per_episode']:.2f} | {entropy} | {row['rl_time_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(aggregates: dict[str, dict[str, Any]], rows: list[dict[str, Any]], path: Path) -> None:
    """Left: held-out accuracy after SFT and after RL, a point per seed (joined), the mean as
    a bar; right: training accuracy per RL step, mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(aggregates)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for x, label in enumerate(labels):
        for row in (r for r in rows if r["algorithm"] == label):
            left.plot(
                [x - 0.15, x + 0.15],
                [row["accuracy_before_rl"], row["accuracy_after"]],
                color="0.6",
                linewidth=0.8,
                zorder=1,
            )
            left.scatter([x - 0.15], [row["accuracy_before_rl"]], color="0.45", s=18, zorder=2)
            left.scatter([x + 0.15], [row["accuracy_after"]], color="C0", s=18, zorder=2)
        summary = aggregates[label]
        left.bar(
            [x - 0.15],
            [summary["accuracy_before_rl"]["mean"]],
            width=0.28,
            color="0.85",
            label="before RL (mean)" if x == 0 else None,
            zorder=0,
        )
        left.bar(
            [x + 0.15],
            [summary["accuracy_after"]["mean"]],
            width=0.28,
            color="C0",
            alpha=0.3,
            label="after RL (mean)" if x == 0 else None,
            zorder=0,
        )
    left.set_xticks(range(len(labels)), labels)
    left.set_ylabel("held-out accuracy (greedy)")
    left.set_ylim(-0.02, 1.02)
    left.set_title("held-out accuracy: points = seeds, bars = mean")
    left.legend(loc="upper left", fontsize=8)
    for i, label in enumerate(labels):
        curve = aggregates[label]["curve"]["accuracy"]
        steps = [s + 1 for s, value in enumerate(curve) if value is not None]
        right.plot(
            steps, [value for value in curve if value is not None], marker="o", markersize=3, color=f"C{i}", label=label
        )
    right.set_xlabel("RL step")
    right.set_ylabel("training accuracy (sampled groups)")
    right.set_ylim(-0.02, 1.02)
    right.xaxis.get_major_locator().set_params(integer=True)
    right.set_title(f"training accuracy, mean over {max(len(s['seeds']) for s in aggregates.values())} seed(s)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def settings_lines(
    args: argparse.Namespace,
    shared: dict[str, Any],
    base: dict[str, Any],
    departures: dict[str, list[str]],
    starts: list[dict[str, Any]],
) -> list[str]:
    from agentic_rl.config import TrainConfig, build

    config = build(TrainConfig, base)
    if args.sft_checkpoint:
        start = f"start: {args.sft_checkpoint} (no cold start)"
    elif args.no_sft or not config.sft.enabled:
        start = f"start: the base model {config.model.name} (no cold start)"
    else:
        collect = config.sft.collect
        start = f"start: {config.model.name} + the default recipe's cold start per seed (sft.collect.source {collect.source}, {collect.num_tasks} tasks)"
    rl = shared["rl"]
    lines = [
        f"Task {shared['env']['name']}; {start}; seeds {','.join(map(str, args.seed_list))}.",
        f"Shared by every algorithm: {rl['steps']} steps x {rl['tasks_per_step']} tasks x {rl['group_size']} samples, "
        f"rl.mini_batches {rl['mini_batches']}, rl.epochs {rl['epochs']}, lr {shared['optim']['lr']}, "
        f"rollout temperature {shared['rollout']['temperature']} / max_new_tokens {shared['rollout']['max_new_tokens']}; "
        f"held-out: {shared['eval']['num_tasks']} test tasks, temperature {shared['eval']['temperature']}.",
    ]
    if starts:
        bases = ", ".join(f"{s['accuracy_base']:.3f}" for s in starts)
        lines.append(f"Base model held-out accuracy per seed: {bases}.")
    for label, changes in departures.items():
        if changes:
            lines.append(
                f"{label}: its recipe ({ALGORITHMS[label][0]}) sets {'; '.join(changes)}; it runs with the shared value."
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.output_dir)
    base = base_recipe(args)
    shared = shared_settings(base)
    from agentic_rl.recipes import load_recipe

    default_shared = shared_settings(load_recipe("default")[1])  # the recipes' departures are named against it
    plans = {label: algorithm_recipe(label, shared, default_shared) for label in args.algorithm_labels}
    from agentic_rl.config import TrainConfig, build

    for _, recipe, _ in plans.values():  # every config is valid before minutes are spent
        build(TrainConfig, recipe)
    departures = {label: changes for label, (_, _, changes) in plans.items()}
    taken = [str(out / f"seed{seed}") for seed in args.seed_list if (out / f"seed{seed}").exists()]
    if taken:  # before minutes of cold start are spent, not at the first RL run
        raise SystemExit(f"--output-dir: {taken[0]} already holds runs; choose another directory")
    out.mkdir(parents=True, exist_ok=True)
    starts: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []

    def write() -> tuple[dict, list[str]]:
        aggregates = aggregate(rows, args.algorithm_labels)
        settings = settings_lines(args, shared, base, departures, starts)
        payload = {
            "settings": settings,
            "args": {k: v for k, v in vars(args).items()},
            "shared": shared,
            "departures": departures,
            "starts": starts,
            "rows": rows,
            "aggregates": aggregates,
        }
        (out / "results.json").write_text(json.dumps(payload, indent=2))
        return aggregates, settings

    for seed in args.seed_list:
        print(f"== seed {seed}: start", flush=True)
        start = start_run(base, args, seed, out / f"seed{seed}" / "start")
        starts.append(start)
        for label, (recipe_name, recipe, _) in plans.items():
            print(f"== seed {seed}: {label} (recipe {recipe_name}) from {start['start_model']}", flush=True)
            rows.append(run_algorithm(label, recipe, start, out / f"seed{seed}" / label))
            write()
    aggregates, settings = write()
    table = markdown(aggregates, rows, settings)
    (out / "results.md").write_text(table)
    plot(aggregates, rows, out / "results.png")
    print(table)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'} and {out / 'results.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

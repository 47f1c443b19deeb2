"""Compare RL algorithms from the same SFT checkpoint on ``arithmetic``: held-out accuracy,
tool calls and wall time.

Each algorithm is a built-in recipe (grpo-tcr is the ``default`` recipe); all of them
train for the same number of steps, tasks and samples per task, from the same SFT
checkpoint (built once here unless ``--sft-checkpoint`` is given), and are evaluated on
the same held-out tasks (greedy). A recipe that does not exist is reported as missing.

    python benchmarks/algorithms_compare.py                      # real model, ~15-20 min on CPU
    python benchmarks/algorithms_compare.py --model tiny-random --no-sft --steps 1 \\
        --tasks-per-step 2 --group-size 4 --eval-tasks 4 --max-new-tokens 16   # wiring check

Writes ``results.json`` and ``results.md`` into ``--output-dir`` (and prints the table).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ALGORITHMS = {"grpo-tcr": "default", "ppo": "ppo", "arpo": "arpo"}
"""Table label -> recipe name."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="base model (default smollm2-135m)")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"comma-separated labels or recipe names (default {','.join(ALGORITHMS)})")
    parser.add_argument("--steps", type=int, default=4, help="RL steps per algorithm (default 4)")
    parser.add_argument("--tasks-per-step", type=int, default=4, help="tasks per RL step (default 4)")
    parser.add_argument("--group-size", type=int, default=8, help="samples per task, ARPO's budget M (default 8)")
    parser.add_argument("--arpo-initial-samples", type=int, default=4, help="ARPO's global samples N (default 4)")
    parser.add_argument("--eval-tasks", type=int, default=50, help="held-out tasks, greedy (default 50)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="tokens per turn (default 96, as the recipes)")
    parser.add_argument("--sft-checkpoint", help="start every algorithm from this model folder (skips building one)")
    parser.add_argument("--no-sft", action="store_true", help="start from the base model itself (wiring checks)")
    parser.add_argument("--sft-tasks", type=int, default=96, help="collection tasks when building the SFT checkpoint (default 96)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="runs/algorithms-compare", help="where runs and results go")
    return parser.parse_args(argv)


def build_sft_checkpoint(args: argparse.Namespace, folder: Path) -> float:
    """Collect successful rollouts with demonstrations and fine-tune on them, as the default
    recipe's SFT stage does; returns the wall time."""
    from agentic_rl.config import CollectConfig, SFTConfig, TrainConfig
    from agentic_rl.models import load
    from agentic_rl.recipes import load_recipe
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.training.collect import collect_successful
    from agentic_rl.training.checkpoint import save_final
    from agentic_rl.training.sft import train_sft

    started = time.monotonic()
    _, recipe = load_recipe("default")
    config = TrainConfig.model_validate({**recipe, "model": {"name": args.model}})
    model, tokenizer = load(args.model)
    model = model.float()
    collect = CollectConfig(**{**config.sft.collect.model_dump(), "num_tasks": args.sft_tasks})
    result = collect_successful(HFBackend(model, tokenizer), config.env.name, config.env.options, collect, seed=args.seed, rollout_config=config.rollout)
    if not result.examples:
        raise SystemExit(f"SFT: no successful trajectories out of {result.attempted}; use --no-sft or --sft-checkpoint")
    train_sft(model, tokenizer, result.examples, SFTConfig(**config.sft.train.model_dump()), parser=config.env.options.get("parser", "hermes"))
    save_final(model, tokenizer, folder)
    print(f"SFT checkpoint: {len(result.examples)} conversations ({result.successful}/{result.attempted} successful) -> {folder}")
    return time.monotonic() - started


def run_algorithm(label: str, recipe_name: str, start_model: str, args: argparse.Namespace, out: Path) -> dict:
    from agentic_rl.recipes import load_recipe
    from agentic_rl.training.pipeline import train

    _, recipe = load_recipe(recipe_name)
    recipe.update(
        model={"name": start_model},
        sft={"enabled": False},
        steps=args.steps, tasks_per_step=args.tasks_per_step, group_size=args.group_size, seed=args.seed,
        eval={**recipe.get("eval", {}), "num_tasks": args.eval_tasks},
        rollout={**recipe.get("rollout", {}), "max_new_tokens": args.max_new_tokens},
        tracking={"sinks": [], "report": False},
        checkpoint_every=0,
        output_dir=str(out / label),
    )
    if "arpo" in recipe:
        recipe["arpo"] = {**recipe["arpo"], "initial_samples": min(args.arpo_initial_samples, args.group_size)}
    started = time.monotonic()
    result = train(recipe, name=recipe_name)
    wall = time.monotonic() - started
    steps = result.steps

    def mean(key: str) -> float | None:
        values = [s[key] for s in steps if key in s]
        return sum(values) / len(values) if values else None

    per_episode = mean("tool_calls_per_episode")
    # Tool calls the policy made per task while training; ARPO counts a shared prefix's calls once.
    per_task = mean("arpo/tool_calls_per_task")
    if per_task is None and per_episode is not None:
        per_task = per_episode * args.group_size
    before, after = result.evals["before"], result.evals["after"]
    return {
        "algorithm": label,
        "recipe": recipe_name,
        "accuracy_before": before["avg@1"],
        "accuracy_after": after["avg@1"],
        "eval_tool_calls_per_episode": after["tool_calls_per_episode"],
        "train_tool_calls_per_episode": per_episode,
        "train_tool_calls_per_task": per_task,
        "train_reward_mean": mean("reward_mean"),
        "rl_time_s": sum(s.get("step_time_s", 0.0) for s in steps),
        "wall_time_s": wall,
        "run_dir": str(result.run_dir),
    }


def markdown(rows: list[dict], settings: str) -> str:
    def cell(value, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    lines = [
        f"Settings: {settings}",
        "",
        "| algorithm | held-out acc before | held-out acc after | eval tool calls / episode | train tool calls / episode | train tool calls / task | RL time (s) | wall time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "missing" in row:
            lines.append(f"| {row['algorithm']} | {row['missing']} | | | | | | |")
            continue
        lines.append(
            f"| {row['algorithm']} | {cell(row['accuracy_before'])} | {cell(row['accuracy_after'])} | {cell(row['eval_tool_calls_per_episode'], 2)} "
            f"| {cell(row['train_tool_calls_per_episode'], 2)} | {cell(row['train_tool_calls_per_task'], 2)} | {cell(row['rl_time_s'], 0)} | {cell(row['wall_time_s'], 0)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import torch

    from agentic_rl.recipes import recipe_names

    args = parse_args(argv)
    torch.manual_seed(args.seed)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    sft_time = 0.0
    if args.sft_checkpoint:
        start_model = args.sft_checkpoint
    elif args.no_sft:
        start_model = args.model
    else:
        start_model = str(out / "sft")
        sft_time = build_sft_checkpoint(args, Path(start_model))
    rows = []
    for label in [a.strip() for a in args.algorithms.split(",") if a.strip()]:
        recipe_name = ALGORITHMS.get(label, label)
        if recipe_name not in recipe_names():
            rows.append({"algorithm": label, "recipe": recipe_name, "missing": f"no recipe {recipe_name!r}"})
            continue
        print(f"== {label} (recipe {recipe_name}) from {start_model}")
        rows.append(run_algorithm(label, recipe_name, start_model, args, out))
    settings = (
        f"start {start_model}; {args.steps} steps x {args.tasks_per_step} tasks x {args.group_size} samples "
        f"(ARPO: {min(args.arpo_initial_samples, args.group_size)} global of {args.group_size}); {args.eval_tasks} held-out tasks, greedy; "
        f"max_new_tokens {args.max_new_tokens}; seed {args.seed}; SFT build {sft_time:.0f} s"
    )
    table = markdown(rows, settings)
    (out / "results.json").write_text(json.dumps({"settings": vars(args), "start_model": start_model, "sft_time_s": sft_time, "rows": rows}, indent=2))
    (out / "results.md").write_text(table)
    print(table)
    print(f"wrote {out / 'results.md'} and {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

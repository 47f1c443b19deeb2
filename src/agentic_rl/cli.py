"""The ``agentic-rl`` command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.table import Table

from agentic_rl import __version__


def _eval(args: argparse.Namespace) -> int:
    from agentic_rl.config import EvalConfig, apply_assignments, build
    from agentic_rl.evaluation.harness import prepare
    from agentic_rl.tracking.display import console, metrics_table, trajectory_progress

    data: dict = {"model": {"name": args.model}, "env": {"name": args.env}}
    for key in ("num_tasks", "k", "num_samples", "seed", "output"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    if args.base_url:
        data["backend"] = {"kind": "openai", "base_url": args.base_url}
    config = build(EvalConfig, apply_assignments(data, args.set or []))
    prepared = prepare(config)
    console.print(f"evaluating [bold]{config.model.name}[/] on [bold]{config.env.name}[/] ({config.num_tasks} tasks x {config.samples_per_task} samples)")
    with trajectory_progress(config.num_tasks * config.samples_per_task, "eval") as on_finish:
        result = prepared.run(on_finish)
    console.print(metrics_table(result.metrics, config.k, title=f"{config.model.name} on {config.env.name} ({result.wall_time_s:.0f} s)"))
    if config.output:
        console.print(f"wrote {config.output}")
    else:
        print(json.dumps(result.metrics, indent=2))
    return 0


def _envs(args: argparse.Namespace) -> int:
    from agentic_rl import envs
    from agentic_rl.tracking.display import console

    table = Table(show_header=True, header_style="bold")
    table.add_column("env")
    table.add_column("description")
    for entry in envs.registered():
        table.add_row(entry.name, entry.description)
    console.print(table)
    return 0


def _train(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build
    from agentic_rl.recipes import load_recipe
    from agentic_rl.tracking.display import console, print_eval, print_step, trajectory_progress
    from agentic_rl.training.pipeline import RunEvents, train

    if args.resume:
        if args.set or args.output_dir or args.recipe != "default":
            raise ConfigError("--resume continues a run with its own config.yaml; drop the recipe, --set and --output-dir")
        name, config = "resumed", None
    else:
        name, data = load_recipe(args.recipe)
        if args.output_dir:
            data["output_dir"] = args.output_dir
        config = build(TrainConfig, apply_assignments(data, args.set or []))
    import time

    started = time.monotonic()
    shown = {"steps": 0}

    def on_config(resolved: TrainConfig) -> None:
        shown["steps"] = resolved.steps
        console.print(f"recipe [bold]{name}[/]: {resolved.description}")

    events = RunEvents(
        on_config=on_config,
        on_stage=lambda message: console.print(f"[cyan]{time.monotonic() - started:6.0f}s >[/] {message}"),
        on_step=lambda metrics: print_step(metrics, shown["steps"]),
        on_eval=lambda label, result: print_eval(label, result.metrics, result.config["k"]),
        progress=trajectory_progress,
    )
    result = train(config, name=name, events=events, resume=args.resume)
    k = next(int(key.split("@")[1]) for key in result.evals["after"] if key.startswith("avg@"))
    summary = Table(title="held-out accuracy", header_style="bold")
    for column in ("stage", f"avg@{k}", "tool_success_rate", "tool_calls_per_episode"):
        summary.add_column(column)
    for label, metrics in result.evals.items():
        summary.add_row(label, f"{metrics[f'avg@{k}']:.3f}", f"{metrics['tool_success_rate']:.3f}", f"{metrics['tool_calls_per_episode']:.2f}")
    console.print(summary)
    console.print(f"run directory: {result.run_dir}  (final model: {result.run_dir / 'final'})")
    return 0


def _recipes(args: argparse.Namespace) -> int:
    from agentic_rl.recipes import describe, recipe_names
    from agentic_rl.tracking.display import console

    table = Table(show_header=True, header_style="bold")
    table.add_column("recipe")
    table.add_column("description")
    for name in recipe_names():
        table.add_row(name, describe(name))
    console.print(table)
    return 0


def _collect(args: argparse.Namespace) -> int:
    from agentic_rl.config import BackendConfig, CollectConfig, ConfigError, ModelConfig, apply_assignments, build
    from agentic_rl.data import write_jsonl
    from agentic_rl.evaluation.harness import env_factory
    from agentic_rl.rollout.backends.factory import build_backend
    from agentic_rl.tracking.display import console, trajectory_progress
    from agentic_rl.training.collect import collect_successful

    overrides = apply_assignments({}, args.set or [])
    env_options = overrides.pop("env", {})
    config = build(CollectConfig, {**{k: v for k, v in vars(args).items() if k in CollectConfig.model_fields and v is not None}, **overrides})
    env_factory(args.env, env_options, split="train")  # fail on bad options before loading the model
    backend = build_backend(BackendConfig(), ModelConfig(name=args.model))
    with trajectory_progress(config.num_tasks * config.samples_per_task, "collect") as on_finish:
        result = collect_successful(backend, args.env, env_options, config, seed=args.seed, on_trajectory=on_finish)
    if not result.examples:
        raise ConfigError("no successful trajectories; try more --num-tasks or --few-shot")
    write_jsonl(args.output, result.examples)
    console.print(f"kept {len(result.examples)} conversations ({result.successful} successful of {result.attempted}) -> {args.output}")
    return 0


def _sft(args: argparse.Namespace) -> int:
    from agentic_rl.config import SFTConfig, apply_assignments, build
    from agentic_rl.data import read_jsonl
    from agentic_rl.models import load
    from agentic_rl.tracking.display import console
    from agentic_rl.training.pipeline import save_final
    from agentic_rl.training.sft import train_sft

    config = build(SFTConfig, apply_assignments({}, args.set or []))
    try:
        examples = read_jsonl(args.data)
    except (OSError, ValueError) as exc:
        from agentic_rl.config import ConfigError

        raise ConfigError(f"--data: {exc}") from None
    model, tokenizer = load(args.model)
    result = train_sft(model, tokenizer, examples, config, parser=args.parser, on_step=lambda m: console.print(f"step {m['step']}  loss {m['loss']:.4f}  lr {m['lr']:.2e}"))
    save_final(model, tokenizer, Path(args.output_dir))
    console.print(f"SFT: {result.examples} conversations, {result.steps} steps, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; saved to {args.output_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentic-rl", description="Train and evaluate tool-using LLM agents with RL.")
    parser.add_argument("--version", action="version", version=f"agentic-rl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    evaluate = commands.add_parser("eval", help="evaluate a model as an agent on an environment")
    evaluate.add_argument("--model", default="smollm2-135m", help="built-in name, local folder or hub id (default: smollm2-135m)")
    evaluate.add_argument("--env", default="arithmetic", help="registered env name (see `agentic-rl envs`)")
    evaluate.add_argument("--num-tasks", type=int, help="held-out tasks to evaluate (default 32)")
    evaluate.add_argument("--k", type=int, help="k of avg@k / pass@k / maj@k (default 4)")
    evaluate.add_argument("--num-samples", type=int, help="samples per task (default k)")
    evaluate.add_argument("--seed", type=int, help="sampling seed (default 0)")
    evaluate.add_argument("--output", help="write the JSON result to this file")
    evaluate.add_argument("--base-url", help="evaluate a remote OpenAI-compatible endpoint instead of a local model")
    evaluate.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any config key, e.g. env.few_shot=3 or rollout.temperature=0.7")
    evaluate.set_defaults(run=_eval)

    list_envs = commands.add_parser("envs", help="list registered environments")
    list_envs.set_defaults(run=_envs)

    training = commands.add_parser("train", help="run a training recipe (default: the embedded CPU demo)")
    training.add_argument("recipe", nargs="?", default="default", help="recipe name (see `agentic-rl recipes`) or a YAML file")
    training.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any config key, e.g. steps=20 or optim.lr=1e-6")
    training.add_argument("--output-dir", help="run directory (default runs/<recipe>-<time>)")
    training.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest complete checkpoint")
    training.set_defaults(run=_train)

    recipes = commands.add_parser("recipes", help="list built-in recipes")
    recipes.set_defaults(run=_recipes)

    collect = commands.add_parser("collect", help="build SFT data from the model's own successful rollouts")
    collect.add_argument("--model", default="smollm2-135m")
    collect.add_argument("--env", default="arithmetic")
    collect.add_argument("--output", required=True, help="JSONL file to write (OpenAI messages with tool calls)")
    collect.add_argument("--num-tasks", type=int, help="training tasks to attempt (default 256)")
    collect.add_argument("--samples-per-task", type=int, help="attempts per task (default 2)")
    collect.add_argument("--few-shot", type=int, help="demonstrations shown while sampling (default 4; not stored)")
    collect.add_argument("--seed", type=int, default=0)
    collect.add_argument("--set", action="append", metavar="KEY=VALUE", help="collect options (e.g. temperature=0.7) or env.<option>=VALUE")
    collect.set_defaults(run=_collect)

    sft = commands.add_parser("sft", help="supervised fine-tuning on multi-turn conversations (JSONL)")
    sft.add_argument("--model", default="smollm2-135m")
    sft.add_argument("--data", required=True, help="JSONL of {\"messages\": [...]} in OpenAI format with tool calls")
    sft.add_argument("--output-dir", required=True, help="where to save the fine-tuned Hugging Face model")
    sft.add_argument("--parser", default="hermes", help="tool-call format used to render tool calls (default hermes)")
    sft.add_argument("--set", action="append", metavar="KEY=VALUE", help="SFT options, e.g. epochs=3 or lr=2e-5")
    sft.set_defaults(run=_sft)
    return parser


def main(argv: list[str] | None = None) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.models import ModelNotFoundError
    from agentic_rl.training.pipeline import TrainingStopped

    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ConfigError, ModelNotFoundError) as exc:
        print(f"agentic-rl: error: {exc}", file=sys.stderr)
        return 2
    except TrainingStopped as exc:
        print(f"agentic-rl: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agentic-rl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

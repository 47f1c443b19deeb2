"""``agentic-rl eval``: a model as an agent on an environment."""

from __future__ import annotations

import argparse
import json


def _eval(args: argparse.Namespace) -> int:
    from agentic_rl.config import EvalConfig, apply_assignments, build
    from agentic_rl.evaluation.harness import prepare
    from agentic_rl.tracking.display import (
        console,
        env_labels,
        env_table,
        metrics_table,
        trajectory_progress,
        without_env_metrics,
    )

    data: dict = {"model": {"name": args.model} if args.model else {}, "env": {"name": args.env}}
    for key in ("num_tasks", "k", "num_samples", "seed", "output", "adapters"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    if args.base_url:
        data["backend"] = {"kind": "openai", "base_url": args.base_url}
    config = build(EvalConfig, apply_assignments(data, args.set or []))
    prepared = prepare(config)
    config = prepared.config  # --adapters: the model is the base the run trained
    console.print(
        f"evaluating [bold]{config.model.name}[/] on [bold]{config.env.name}[/] ({config.num_tasks} tasks x {config.samples_per_task} samples)"
    )
    with trajectory_progress(len(prepared.task_indices) * config.samples_per_task, "eval") as on_finish:
        result = prepared.run(on_finish)
    console.print(
        metrics_table(
            without_env_metrics(result.metrics, config.k),
            config.k,
            title=f"{config.model.name} on {config.env.name} ({result.wall_time_s:.0f} s)",
        )
    )
    if env_labels(result.metrics, config.k):
        console.print(env_table(result.metrics, config.k))
    if config.output:
        console.print(f"wrote {config.output}")
    else:
        print(json.dumps(result.metrics, indent=2))
    return 0


def register(commands) -> None:
    evaluate = commands.add_parser("eval", help="evaluate a model as an agent on an environment")
    evaluate.add_argument(
        "--model",
        help="built-in name, local folder or hub id (default: smollm2-135m; with --adapters, the base the run trained)",
    )
    evaluate.add_argument("--env", default="arithmetic", help="registered env name (see `agentic-rl envs`)")
    evaluate.add_argument("--num-tasks", type=int, help="held-out tasks to evaluate (default 32)")
    evaluate.add_argument("--k", type=int, help="k of avg@k / pass@k / maj@k (default 4)")
    evaluate.add_argument("--num-samples", type=int, help="samples per task (default k)")
    evaluate.add_argument("--seed", type=int, help="sampling seed (default 0)")
    evaluate.add_argument("--output", help="write the JSON result to this file")
    evaluate.add_argument(
        "--adapters", help="a run's final/adapters folder (lora.roles): each role sampled by the adapter it trained"
    )
    evaluate.add_argument("--base-url", help="evaluate a remote OpenAI-compatible endpoint instead of a local model")
    evaluate.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override any config key, e.g. env.few_shot=3 or rollout.temperature=0.7",
    )
    evaluate.set_defaults(run=_eval)

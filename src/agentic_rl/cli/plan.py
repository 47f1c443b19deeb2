"""``agentic-rl plan``: a recipe's per-device memory before it runs."""

from __future__ import annotations

import argparse


def _plan(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agentic_rl.accel.allocator import physical_bytes
    from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build
    from agentic_rl.planning import advice
    from agentic_rl.planning.config_plan import plan_config
    from agentic_rl.planning.report import plan_summary, plan_table, plan_verdict
    from agentic_rl.recipes import load_recipe

    if args.gpus < 1:
        raise ConfigError("--gpus: expected at least 1 trainer rank")
    config = build(TrainConfig, apply_assignments(load_recipe(args.recipe)[1], args.set or []))
    if args.device == "cpu":
        device_bytes, label = float(physical_bytes() or 0), "this machine's memory"
    else:
        device_bytes, label = args.gpu_memory_gb * 1e9, f"{args.gpus} x {args.gpu_memory_gb:g} GB"
    try:
        plan = plan_config(config, nproc=args.gpus, device=args.device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = Console()
    out.print(plan_summary(plan))
    out.print(plan_table(plan))
    out.print(plan_verdict(plan, device_bytes, label))
    problem = advice(plan, device_bytes)
    if problem:
        raise ConfigError(problem)
    return 0


def register(commands) -> None:
    plan = commands.add_parser(
        "plan", help="estimate per-device memory of a recipe before running it; exit 2 when it cannot fit"
    )
    plan.add_argument("recipe", nargs="?", default="default", help="recipe name or a YAML file")
    plan.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any config key, as with train")
    plan.add_argument("--gpus", type=int, default=1, metavar="N", help="trainer ranks, one GPU each (train --nproc N)")
    plan.add_argument("--gpu-memory-gb", type=float, default=80.0, metavar="GB", help="memory of each GPU (default 80)")
    plan.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="plan for GPUs (default) or for this machine's CPU and memory",
    )
    plan.set_defaults(run=_plan)

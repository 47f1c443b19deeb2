"""``agentic-rl train``: a recipe in one process, or on several (torchrun or Ray actors)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.table import Table


def _train(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build
    from agentic_rl.recipes import load_recipe
    from agentic_rl.tracking.display import StepClock, console, print_eval, print_step, trajectory_progress
    from agentic_rl.training.pipeline import RunEvents, train

    if args.nproc < 1 or args.max_restarts < 0:
        raise ConfigError("--nproc: expected at least 1 process (and --max-restarts at least 0)")
    if args.dry_run:
        return _dry_run(args)
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        config = _check_launch(args)  # one clear line here, not a failure inside every process
        return _launch(args, config)
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if restarted and args.output_dir and not args.resume:  # torch elastic restarted the processes: continue the run
        args.resume, args.set, args.output_dir, args.recipe = args.output_dir, None, None, "default"
    overrides = None
    if args.resume:
        if args.output_dir or args.recipe != "default":
            raise ConfigError(
                "--resume continues a run in its own directory with its own config.yaml; drop the recipe and --output-dir"
            )
        name, config, overrides = "resumed", None, apply_assignments({}, args.set or [])
    else:
        name, data = load_recipe(args.recipe)
        if args.output_dir:
            data["output_dir"] = args.output_dir
        config = build(TrainConfig, apply_assignments(data, args.set or []))
    import time

    started = time.monotonic()
    shown = {"steps": 0, "clock": None}

    def on_config(resolved: TrainConfig) -> None:
        shown["steps"], shown["clock"] = resolved.rl.steps, StepClock(resolved.rl.steps)
        console.print(f"recipe [bold]{name}[/]: {resolved.description}")

    events = RunEvents(
        on_config=on_config,
        on_stage=lambda message: console.print(f"[cyan]{time.monotonic() - started:6.0f}s >[/] {message}"),
        on_step=lambda metrics: print_step(metrics, shown["steps"], shown["clock"]),
        on_eval=lambda label, result: print_eval(label, result.metrics, result.config["k"]),
        progress=trajectory_progress,
    )
    result = train(config, name=name, events=events, resume=args.resume, overrides=overrides)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # rank 0 reports the run
    k = next(int(key.split("@")[1]) for key in result.evals["after"] if key.startswith("avg@"))
    summary = Table(title="held-out accuracy", header_style="bold")
    # A mix's envs and an env's roles have their own avg@k (avg@1@solver): a column each.
    parts = list(dict.fromkeys(key for m in result.evals.values() for key in m if key.startswith(f"avg@{k}@")))
    for column in ("stage", f"avg@{k}", *parts, "tool_success_rate", "tool_calls_per_episode"):
        summary.add_column(column)
    for label, metrics in result.evals.items():
        summary.add_row(
            label,
            f"{metrics[f'avg@{k}']:.3f}",
            *(f"{metrics[part]:.3f}" if part in metrics else "-" for part in parts),
            f"{metrics['tool_success_rate']:.3f}",
            f"{metrics['tool_calls_per_episode']:.2f}",
        )
    console.print(summary)
    console.print(f"run directory: {result.run_dir}  (final model: {result.run_dir / 'final'})")
    return 0


def _dry_run(args: argparse.Namespace) -> int:
    """Every check a run makes before its run directory or model (``training.preflight``), then exit."""
    from agentic_rl.training.preflight import preflight, resolve_parser

    config = _check_launch(args)
    resolve_parser(config)
    checked = preflight(config)
    sandbox = "runs no code" if checked.sandbox is None else checked.sandbox[0].describe()
    print(f"env {config.env.name}: {len(checked.task_indices)} training tasks (rl.task_offset {config.rl.task_offset})")
    print(f"model {config.model.name}: {checked.model}")
    print(f"sandbox: {sandbox}")
    for warning in checked.sandbox[1] if checked.sandbox else ():
        print(f"warning: {warning}")
    print(
        f"dry run: every check passed; nothing was written (would run {config.rl.steps} RL steps on {args.nproc} process(es))"
    )
    return 0


def _check_launch(args: argparse.Namespace):
    from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build, check_world_size, resume_config
    from agentic_rl.recipes import load_recipe
    from agentic_rl.training.run_dir import RunDirectory

    if args.resume:
        config = resume_config(RunDirectory.existing(args.resume)[2], apply_assignments({}, args.set or []))[0]
    else:
        config = build(TrainConfig, apply_assignments(load_recipe(args.recipe)[1], args.set or []))
    try:
        check_world_size(config, args.nproc)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if config.distributed.engine == "ray" and args.max_restarts:
        raise ConfigError(
            "--max-restarts: with distributed.engine ray the trainer ranks are Ray actors; rerun with --resume RUN_DIR after a failure"
        )
    return config


def _launch(args: argparse.Namespace, config) -> int:
    """Run this same command on ``--nproc`` processes: under torchrun (standalone rendezvous
    on this machine; for several machines start ``torchrun -m agentic_rl train ...`` on
    each), or as Ray actors with ``distributed.engine: ray`` (anywhere on the cluster)."""
    import subprocess
    import time

    from agentic_rl.distributed.launch import strip_launch_flags, torchrun_command

    if config.distributed.engine == "ray":
        from agentic_rl.distributed.ray_trainers import launch_trainers

        argv = strip_launch_flags(args.argv)
        if not args.output_dir and not args.resume:  # every rank must write into the same run
            name = Path(args.recipe).stem if args.recipe.endswith((".yaml", ".yml")) else args.recipe
            argv += ["--output-dir", str(Path("runs").resolve() / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")]
        return launch_trainers(argv, args.nproc, config.distributed)

    fixed = bool(args.max_restarts) and not args.output_dir and not args.resume
    return subprocess.run(
        torchrun_command(
            args.argv, nproc=args.nproc, max_restarts=args.max_restarts, recipe=args.recipe, fixed_output_dir=fixed
        )
    ).returncode


def register(commands) -> None:
    training = commands.add_parser("train", help="run a training recipe (default: the embedded CPU demo)")
    training.add_argument(
        "recipe", nargs="?", default="default", help="recipe name (see `agentic-rl recipes`) or a YAML file"
    )
    training.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override any config key, e.g. rl.steps=20 or optim.lr=1e-6 (with --resume: rl.steps, optim.lr/schedule/warmup_steps, eval.*, tracking.*, checkpoint_every, keep_checkpoints, backend.api_key)",
    )
    training.add_argument("--output-dir", help="run directory (default runs/<recipe>-<time>)")
    training.add_argument(
        "--dry-run",
        action="store_true",
        help="check the env, its tasks, the expert, the sandbox and the model (offline), then exit: nothing is written",
    )
    training.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its newest complete checkpoint, with its own config.yaml (--set may change what is safe mid-run)",
    )
    training.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="train on N processes on this machine (torchrun; one GPU each where there are GPUs); see trainer.strategy",
    )
    training.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="K",
        help="with --nproc: restart all processes up to K times after a failure, resuming from the newest checkpoint",
    )
    training.set_defaults(run=_train)

"""The ``agentic-rl`` command."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from rich.table import Table

from agentic_rl import __version__


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

    data: dict = {"model": {"name": args.model}, "env": {"name": args.env}}
    for key in ("num_tasks", "k", "num_samples", "seed", "output"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    if args.base_url:
        data["backend"] = {"kind": "openai", "base_url": args.base_url}
    config = build(EvalConfig, apply_assignments(data, args.set or []))
    prepared = prepare(config)
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


def _envs(args: argparse.Namespace) -> int:
    from agentic_rl import envs
    from agentic_rl.tracking.display import print_listing

    print_listing(("env", "description"), [(entry.name, entry.description) for entry in envs.registered()])
    return 0


def _train(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build
    from agentic_rl.recipes import load_recipe
    from agentic_rl.tracking.display import console, print_eval, print_step, trajectory_progress
    from agentic_rl.training.pipeline import RunEvents, train

    if args.nproc < 1 or args.max_restarts < 0:
        raise ConfigError("--nproc: expected at least 1 process (and --max-restarts at least 0)")
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
    result = train(config, name=name, events=events, resume=args.resume, overrides=overrides)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # rank 0 reports the run
    k = next(int(key.split("@")[1]) for key in result.evals["after"] if key.startswith("avg@"))
    summary = Table(title="held-out accuracy", header_style="bold")
    for column in ("stage", f"avg@{k}", "tool_success_rate", "tool_calls_per_episode"):
        summary.add_column(column)
    for label, metrics in result.evals.items():
        summary.add_row(
            label,
            f"{metrics[f'avg@{k}']:.3f}",
            f"{metrics['tool_success_rate']:.3f}",
            f"{metrics['tool_calls_per_episode']:.2f}",
        )
    console.print(summary)
    console.print(f"run directory: {result.run_dir}  (final model: {result.run_dir / 'final'})")
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


def _recipes(args: argparse.Namespace) -> int:
    from agentic_rl.recipes import describe, recipe_names
    from agentic_rl.tracking.display import print_listing

    print_listing(("recipe", "description"), [(name, describe(name)) for name in recipe_names()])
    return 0


def _collect(args: argparse.Namespace) -> int:
    from agentic_rl.config import (
        BackendConfig,
        CollectConfig,
        ConfigError,
        ModelConfig,
        RolloutConfig,
        apply_assignments,
        build,
    )
    from agentic_rl.data import write_jsonl
    from agentic_rl.engines.factory import build_backend
    from agentic_rl.envs import env_factory
    from agentic_rl.tracking.display import console, trajectory_progress
    from agentic_rl.training.collect import collect_expert, collect_successful

    overrides = apply_assignments({}, args.set or [])
    env_options = overrides.pop("env", {})
    rollout_config = build(RolloutConfig, overrides.pop("rollout", {}))
    config = build(
        CollectConfig,
        {**{k: v for k, v in vars(args).items() if k in CollectConfig.model_fields and v is not None}, **overrides},
    )
    env_factory(args.env, env_options, split="train")  # fail on bad options before loading the model
    if (
        config.source == "expert"
    ):  # the model's chat template decides the layout (tools in the template or in the system message)
        from agentic_rl.chat import ChatRenderer
        from agentic_rl.models.loading import load_tokenizer

        result = collect_expert(
            args.env,
            env_options,
            config,
            renderer=ChatRenderer(load_tokenizer(args.model)),
            rollout_config=rollout_config,
        )
    else:
        backend = build_backend(BackendConfig(), ModelConfig(name=args.model))
        with trajectory_progress(config.num_tasks * config.samples_per_task, "collect") as on_finish:
            result = collect_successful(
                backend,
                args.env,
                env_options,
                config,
                seed=args.seed,
                rollout_config=rollout_config,
                on_trajectory=on_finish,
            )
    if not result.examples:
        raise ConfigError("no correct trajectories; try more --num-tasks or --few-shot")
    write_jsonl(args.output, result.examples)
    console.print(
        f"kept {len(result.examples)} conversations ({result.successful} correct of {result.attempted}) -> {args.output}"
    )
    return 0


def _set_precision(model, setting: str) -> None:
    """Resolve ``--precision`` for the loaded model's device and set its compute precision."""
    from agentic_rl.models.precision import apply_precision
    from agentic_rl.tracking.display import console

    resolved = apply_precision(model, setting)
    console.print(f"precision: {resolved.precision} ({resolved.reason})")


def _sft(args: argparse.Namespace) -> int:
    from agentic_rl.config import SFTConfig, apply_assignments, build
    from agentic_rl.data import read_jsonl
    from agentic_rl.models import load
    from agentic_rl.tracking.display import console
    from agentic_rl.training.checkpoint import save_final
    from agentic_rl.training.sft import train_sft

    config = build(SFTConfig, apply_assignments({}, args.set or []))
    try:
        examples = read_jsonl(args.data)
    except (OSError, ValueError) as exc:
        from agentic_rl.config import ConfigError

        raise ConfigError(f"--data: {exc}") from None
    model, tokenizer = load(args.model)
    _set_precision(model, args.precision)
    result = train_sft(
        model,
        tokenizer,
        examples,
        config,
        parser=args.parser,
        on_step=lambda m: console.print(f"step {m['step']}  loss {m['loss']:.4f}  lr {m['lr']:.2e}"),
    )
    save_final(model, tokenizer, Path(args.output_dir))
    console.print(
        f"SFT: {result.examples} conversations, {result.steps} steps, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; saved to {args.output_dir}"
    )
    return 0


def _dpo(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError, DPOConfig, apply_assignments, build
    from agentic_rl.data import read_jsonl
    from agentic_rl.models import load
    from agentic_rl.tracking.display import console
    from agentic_rl.training.checkpoint import save_final
    from agentic_rl.training.dpo import pairs_from_rollout_records, train_dpo, validate_pair

    config = build(DPOConfig, apply_assignments({}, args.set or []))
    source = "--data" if args.data else "--rollouts"
    try:
        if args.data:
            pairs = read_jsonl(args.data)
            for index, pair in enumerate(pairs):
                validate_pair(pair, index)
        else:
            pairs = pairs_from_rollout_records(read_jsonl(args.rollouts), args.parser)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if not pairs:
        raise ConfigError(f"{source}: no preference pairs (a rollout group needs two different rewards)")
    model, tokenizer = load(args.model)
    _set_precision(model, args.precision)
    result = train_dpo(
        model,
        tokenizer,
        pairs,
        config,
        parser=args.parser,
        on_step=lambda m: console.print(
            f"step {m['step']}  loss {m['loss']:.4f}  margin {m['margin']:+.4f}  acc {m['accuracy']:.2f}  lr {m['lr']:.2e}"
        ),
    )
    save_final(model, tokenizer, Path(args.output_dir))
    console.print(
        f"DPO: {result.pairs} pairs, {result.steps} steps, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; saved to {args.output_dir}"
    )
    return 0


def _report(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.tracking.display import console
    from agentic_rl.tracking.report import NotARunDirectory, build_report

    try:
        path = build_report(
            args.run_dir, args.output, max_rollouts=args.max_rollouts, tokens_per_call_threshold=args.tokens_per_call
        )
    except NotARunDirectory as exc:
        raise ConfigError(str(exc)) from None
    console.print(f"wrote {path}")
    return 0


def _index_build(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.retrieval import build_index
    from agentic_rl.tracking.display import console

    if args.corpus == "builtin":
        from agentic_rl.envs.search_data import demo_corpus

        documents = demo_corpus(args.seed)
    elif not Path(args.corpus).is_file():
        raise ConfigError(f"corpus {args.corpus!r} does not exist (JSONL with id, title, text per line, or 'builtin')")
    else:
        documents = args.corpus
    try:
        meta = build_index(documents, args.out)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    console.print(f"indexed {meta['num_docs']} documents in {meta['build_time_s']:.1f} s -> {args.out}")
    return 0


def _retriever_serve(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.retrieval import CachedRetriever, load_index
    from agentic_rl.retrieval.http import TOKEN_VARIABLE, RetrievalServer
    from agentic_rl.tracking.display import console

    token = os.environ.get(TOKEN_VARIABLE) or None
    try:
        retriever = CachedRetriever(load_index(args.index), max_size=args.cache_size)
        # Beyond loopback only with a token (clients send it from the same variable).
        server = RetrievalServer(retriever, args.host, args.port, allow_remote=token is not None, token=token)
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise ConfigError(str(exc)) from None
    console.print(f'serving {args.index} at {server.url}/retrieve (POST {{"queries": [...], "topk": 3}}); Ctrl-C stops')
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def _serve(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.gateway.server import TOKEN_VARIABLE, GatewayServer
    from agentic_rl.tracking.display import console

    name = args.model
    if (Path(name) / "final").is_dir():  # a run directory: its trained model
        name = str(Path(name) / "final")
    token = os.environ.get(TOKEN_VARIABLE) or None
    backend = _serving_backend(args, name)
    try:
        server = GatewayServer(
            backend,
            model_name=args.model_name or args.model,
            parser=args.parser,
            host=args.host,
            port=args.port,
            allow_remote=token is not None,
            token=token,
            max_context=args.max_context,
        )
    except (FileNotFoundError, ValueError, OSError) as exc:
        backend.close()
        raise ConfigError(str(exc)) from None
    engine = f"vLLM at {backend.base_url}" if args.engine == "vllm" else "the in-process engine"
    console.print(
        f"serving {name} with {engine} at {server.url}/v1 (OpenAI chat completions; an episode's calls under {server.url}/episodes/ID/v1); Ctrl-C stops"
    )
    # uvicorn re-raises SIGTERM after its graceful shutdown: make it an exit that runs the
    # cleanup below, so a managed vLLM server is stopped with the gateway, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.service.close()
        server.server_close()
        backend.close()
    return 0


def _serving_backend(args: argparse.Namespace, name: str):
    """The token engine behind ``agentic-rl serve``: the in-process HF engine, or vLLM (a
    running server at backend.base_url, or one started from backend.python)."""
    from agentic_rl.config import BackendConfig, ConfigError, apply_assignments, build

    overrides = apply_assignments({}, args.set or [])
    other = sorted(set(overrides) - {"backend"})
    if other:
        raise ConfigError(
            f"--set: serve takes backend.* keys only (e.g. backend.base_url, backend.python), got {other[0]}"
        )
    if args.engine == "hf":
        if overrides:
            raise ConfigError(
                "--set backend.*: only with --engine vllm (the in-process engine takes --device and --batch-size)"
            )
        from agentic_rl.engines.hf import HFBackend
        from agentic_rl.models import load

        try:
            model, tokenizer = load(name, device=args.device)
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise ConfigError(str(exc)) from None
        return HFBackend(model, tokenizer, batch_size=args.batch_size)
    from agentic_rl.engines.vllm import build_vllm_backend

    config = build(BackendConfig, {**overrides.get("backend", {}), "kind": "vllm"})
    try:
        return build_vllm_backend(
            config, name
        )  # with base_url only the tokenizer loads; else the model, once, to write the server's folder
    except (FileNotFoundError, OSError) as exc:
        raise ConfigError(str(exc)) from None


def _train_agent(args: argparse.Namespace) -> int:
    from agentic_rl import agents
    from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build
    from agentic_rl.data.conversations import read_jsonl
    from agentic_rl.imports import ImportPathError, import_object
    from agentic_rl.tracking.display import console, print_step

    sys.path.insert(0, os.getcwd())  # the agent's module may sit in the working directory, as with python -m
    try:
        agent = import_object(args.agent, "agent")
        reward = import_object(args.reward, "--reward") if args.reward else None
    except ImportPathError as exc:
        raise ConfigError(str(exc)) from None

    def tasks_from(path: str, flag: str) -> list[dict]:
        try:
            return read_jsonl(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{flag}: {exc}") from None

    tasks = tasks_from(args.tasks, "--tasks")
    eval_tasks = tasks_from(args.eval_tasks, "--eval-tasks") if args.eval_tasks else None
    if args.resume and args.output_dir:
        raise ConfigError(
            "--output-dir: a resumed run continues in its own directory (--resume RUN_DIR); leave --output-dir out"
        )
    overrides = apply_assignments({}, args.set or [])
    config = (
        overrides
        if args.resume
        else build(TrainConfig, {**overrides, **({"output_dir": args.output_dir} if args.output_dir else {})})
    )
    if args.resume:
        from agentic_rl.training.run_dir import RunDirectory

        steps = int(overrides.get("steps", RunDirectory.existing(args.resume)[2].get("steps", 0)))
    else:
        steps = config.steps
        console.print(
            f"training {args.agent} on {len(tasks)} tasks through the gateway: {config.steps} steps x {config.tasks_per_step} tasks x {config.group_size} episodes"
        )
    try:
        result = agents.train(
            agent,
            tasks,
            reward,
            config,
            eval_tasks=eval_tasks,
            eval_k=args.eval_k,
            resume=args.resume,
            on_agent_error=args.on_agent_error,
            on_step=lambda metrics: print_step(metrics, steps),
            on_stage=lambda line: console.print(line),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for label, metrics in result.evals.items():
        console.print(
            f"held-out ({label}): avg@{args.eval_k} {metrics[f'avg@{args.eval_k}']:.3f}  pass@{args.eval_k} {metrics[f'pass@{args.eval_k}']:.3f}  calls/episode {metrics['calls_per_episode']:.2f}  agent errors {metrics['agent_errors']:.2f}"
        )
    if result.output_dir is not None:
        console.print(f"run directory: {result.output_dir}  (final model: {result.output_dir / 'final'})")
    return 0


def _data_gsm8k_to_sft(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.envs.math_python import gsm8k_to_sft
    from agentic_rl.tracking.display import console

    if not Path(args.input).is_file():
        raise ConfigError(f"input {args.input!r} does not exist (GSM8K JSONL with question and answer per line)")
    try:
        stats = gsm8k_to_sft(
            args.input,
            args.out,
            tool=args.tool,
            parser=args.parser,
            keep_mismatches=args.keep_mismatches,
            limit=args.limit,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    flagged = f"{stats.flagged} flagged ({stats.mismatched_calls} calls failed or differ from the annotation; {'kept' if args.keep_mismatches else 'left out'})"
    console.print(
        f"{stats.rows} rows -> {stats.written} conversations with {stats.calls} {args.tool} calls; {flagged}; {len(stats.skipped)} skipped -> {args.out}"
    )
    for line in stats.skipped[:5]:
        console.print(f"  skipped {line}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentic-rl", description="Train and evaluate tool-using LLM agents with RL.")
    parser.add_argument("--version", action="version", version=f"agentic-rl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    evaluate = commands.add_parser("eval", help="evaluate a model as an agent on an environment")
    evaluate.add_argument(
        "--model", default="smollm2-135m", help="built-in name, local folder or hub id (default: smollm2-135m)"
    )
    evaluate.add_argument("--env", default="arithmetic", help="registered env name (see `agentic-rl envs`)")
    evaluate.add_argument("--num-tasks", type=int, help="held-out tasks to evaluate (default 32)")
    evaluate.add_argument("--k", type=int, help="k of avg@k / pass@k / maj@k (default 4)")
    evaluate.add_argument("--num-samples", type=int, help="samples per task (default k)")
    evaluate.add_argument("--seed", type=int, help="sampling seed (default 0)")
    evaluate.add_argument("--output", help="write the JSON result to this file")
    evaluate.add_argument("--base-url", help="evaluate a remote OpenAI-compatible endpoint instead of a local model")
    evaluate.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override any config key, e.g. env.few_shot=3 or rollout.temperature=0.7",
    )
    evaluate.set_defaults(run=_eval)

    list_envs = commands.add_parser("envs", help="list registered environments")
    list_envs.set_defaults(run=_envs)

    training = commands.add_parser("train", help="run a training recipe (default: the embedded CPU demo)")
    training.add_argument(
        "recipe", nargs="?", default="default", help="recipe name (see `agentic-rl recipes`) or a YAML file"
    )
    training.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override any config key, e.g. steps=20 or optim.lr=1e-6 (with --resume: steps, optim.lr/schedule/warmup_steps, eval.*, tracking.*, checkpoint_every, keep_checkpoints, backend.api_key)",
    )
    training.add_argument("--output-dir", help="run directory (default runs/<recipe>-<time>)")
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

    recipes = commands.add_parser("recipes", help="list built-in recipes")
    recipes.set_defaults(run=_recipes)

    collect = commands.add_parser(
        "collect", help="build SFT data from the model's own correct rollouts (or an env's expert)"
    )
    collect.add_argument("--model", default="smollm2-135m")
    collect.add_argument("--env", default="arithmetic")
    collect.add_argument("--output", required=True, help="JSONL file to write (OpenAI messages with tool calls)")
    collect.add_argument("--num-tasks", type=int, help="training tasks to attempt (default 256)")
    collect.add_argument("--samples-per-task", type=int, help="attempts per task (default 2)")
    collect.add_argument("--few-shot", type=int, help="demonstrations shown while sampling (default 4; not stored)")
    collect.add_argument(
        "--source",
        choices=("model", "expert"),
        help="model: the model's own correct rollouts (default); expert: the env's scripted expert (e.g. search-qa)",
    )
    collect.add_argument("--seed", type=int, default=0)
    collect.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="collect options (e.g. temperature=0.7), env.<option>=VALUE, or rollout.<option>=VALUE (limits and context policy the episodes run under)",
    )
    collect.set_defaults(run=_collect)

    sft = commands.add_parser("sft", help="supervised fine-tuning on multi-turn conversations (JSONL)")
    sft.add_argument("--model", default="smollm2-135m")
    sft.add_argument("--data", required=True, help='JSONL of {"messages": [...]} in OpenAI format with tool calls')
    sft.add_argument("--output-dir", required=True, help="where to save the fine-tuned Hugging Face model")
    sft.add_argument("--parser", default="hermes", help="tool-call format used to render tool calls (default hermes)")
    sft.add_argument("--set", action="append", metavar="KEY=VALUE", help="SFT options, e.g. epochs=3 or lr=2e-5")
    sft.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16-mixed"],
        default="auto",
        help="fp32, or bf16-mixed (float32 master weights, bf16 compute); auto picks by device (default)",
    )
    sft.set_defaults(run=_sft)

    dpo = commands.add_parser(
        "dpo",
        help="offline DPO on preference pairs of conversations (JSONL), or pairs built from a run's rollouts.jsonl",
    )
    dpo.add_argument("--model", default="smollm2-135m")
    source = dpo.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help='JSONL of {"prompt": [...], "chosen": [...], "rejected": [...]} OpenAI messages')
    source.add_argument(
        "--rollouts", help="a run's rollouts.jsonl: pairs are the best against the worst reward of each logged group"
    )
    dpo.add_argument("--output-dir", required=True, help="where to save the trained Hugging Face model")
    dpo.add_argument("--parser", default="hermes", help="tool-call format used to render tool calls (default hermes)")
    dpo.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="DPO options, e.g. beta=0.1, lr=1e-6 or loss_type=ipo"
    )
    dpo.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16-mixed"],
        default="auto",
        help="fp32, or bf16-mixed (float32 master weights, bf16 compute); auto picks by device (default)",
    )
    dpo.set_defaults(run=_dpo)

    report = commands.add_parser(
        "report", help="write a self-contained report.html (plots, eval table, rollouts) for a run directory"
    )
    report.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `agentic-rl train`")
    report.add_argument("--output", help="where to write the HTML (default RUN_DIR/report.html)")
    report.add_argument("--max-rollouts", type=int, default=24, help="training rollouts to include (default 24)")
    report.add_argument(
        "--tokens-per-call",
        type=float,
        default=100.0,
        help="behaviour analysis: sampled tokens per tool call above which an episode is deliberative (default 100)",
    )
    report.set_defaults(run=_report)

    index = commands.add_parser("index", help="retrieval indexes").add_subparsers(dest="index_command", required=True)
    index_build = index.add_parser("build", help="build a BM25 index from a JSONL corpus ({id, title, text} per line)")
    index_build.add_argument("corpus", help="corpus JSONL, or 'builtin' for the search-qa demo corpus")
    index_build.add_argument("--out", required=True, help="index folder to write")
    index_build.add_argument("--seed", type=int, default=0, help="seed of the builtin corpus (default 0)")
    index_build.set_defaults(run=_index_build)

    retriever = commands.add_parser("retriever", help="retrieval server").add_subparsers(
        dest="retriever_command", required=True
    )
    retriever_serve = retriever.add_parser("serve", help="serve an index over HTTP on loopback (Search-R1 protocol)")
    retriever_serve.add_argument("index", help="index folder from `agentic-rl index build`")
    retriever_serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); beyond loopback only with a bearer token in $AGENTIC_RL_RETRIEVER_TOKEN",
    )
    retriever_serve.add_argument("--port", type=int, default=8000)
    retriever_serve.add_argument("--cache-size", type=int, default=10_000, help="cached (query, k) results")
    retriever_serve.set_defaults(run=_retriever_serve)

    serve = commands.add_parser(
        "serve",
        help="serve a model (or a run's final model) as an OpenAI-compatible API that records the exact tokens per episode",
    )
    serve.add_argument("model", help="built-in name, local folder, or a run directory (its final/ model)")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); beyond loopback only with a bearer token in $AGENTIC_RL_GATEWAY_TOKEN",
    )
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--parser", default="hermes", help="the model's tool-call format (hermes, retool, search-r1)")
    serve.add_argument(
        "--model-name", help="the model id clients send and /v1/models lists (default: the model argument)"
    )
    serve.add_argument(
        "--engine",
        choices=("hf", "vllm"),
        default="hf",
        help="hf: the in-process engine; vllm: a vLLM server (backend.base_url, or one started from backend.python)",
    )
    serve.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="with --engine vllm: backend settings, e.g. backend.base_url=http://127.0.0.1:8001 or backend.python=.venv-vllm/bin/python",
    )
    serve.add_argument("--device", default="auto", help="cpu, cuda or auto")
    serve.add_argument("--batch-size", type=int, default=64, help="most sequences decoded at once")
    serve.add_argument("--max-context", type=int, default=8192, help="most prompt + completion tokens per call")
    serve.set_defaults(run=_serve)

    train_agent = commands.add_parser(
        "train-agent", help="RL on an agent program that calls the policy through the OpenAI API (via the gateway)"
    )
    train_agent.add_argument(
        "agent",
        help="import path of agent(task, client), e.g. my_agents:calculator (the working directory is importable)",
    )
    train_agent.add_argument(
        "--tasks", required=True, help="JSONL file, one task object per line (passed to the agent and the reward)"
    )
    train_agent.add_argument(
        "--reward", help="import path of reward(task, result) -> float (or the agent posts /episodes/{id}/reward)"
    )
    train_agent.add_argument(
        "--on-agent-error",
        choices=("infra", "zero"),
        default="infra",
        help="an exception in the agent: an infrastructure error (masked) or reward 0",
    )
    train_agent.add_argument(
        "--output-dir", help="a run directory: config.yaml, metrics.jsonl, eval_*.json, checkpoints/, final/"
    )
    train_agent.add_argument(
        "--eval-tasks", help="JSONL file of held-out tasks: the agent is evaluated on them before and after training"
    )
    train_agent.add_argument("--eval-k", type=int, default=1, help="episodes per held-out task (avg@k, pass@k)")
    train_agent.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its newest complete checkpoint (--set may change steps, optim.lr, ...)",
    )
    train_agent.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any training config key, e.g. steps=20 or model.name=tiny-random",
    )
    train_agent.set_defaults(run=_train_agent)

    data = commands.add_parser("data", help="dataset conversion").add_subparsers(dest="data_command", required=True)
    gsm8k = data.add_parser(
        "gsm8k-to-sft", help="turn GSM8K's <<expr=result>> annotations into tool-use SFT conversations"
    )
    gsm8k.add_argument("input", metavar="IN.jsonl", help="GSM8K JSONL (question, answer with #### N)")
    gsm8k.add_argument(
        "--out", required=True, help="JSONL of OpenAI messages with tool calls, for `agentic-rl sft --data`"
    )
    gsm8k.add_argument(
        "--tool",
        choices=("calculator", "python"),
        default="calculator",
        help="tool that runs each expression (default calculator)",
    )
    gsm8k.add_argument(
        "--parser",
        choices=("hermes", "retool"),
        default="hermes",
        help="the env format whose system prompt the conversations carry (default hermes)",
    )
    gsm8k.add_argument(
        "--keep-mismatches",
        action="store_true",
        help="keep conversations where a tool output differs from the annotation (flagged in metadata)",
    )
    gsm8k.add_argument("--limit", type=int, help="convert only the first N rows")
    gsm8k.set_defaults(run=_data_gsm8k_to_sft)
    return parser


def _terminated(signum: int, frame) -> None:
    print("agentic-rl: terminated", file=sys.stderr)
    sys.exit(128 + signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.engines.http import BackendError
    from agentic_rl.models import ModelNotFoundError
    from agentic_rl.training.pipeline import TrainingStopped

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if argv is None and threading.current_thread() is threading.main_thread():
        # SIGTERM (a scheduler, torchrun stopping its workers, `kill`) would end the process
        # without running finally blocks or atexit: managed vLLM servers and scratch folders
        # on /dev/shm would outlive it. Exit through them instead.
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return args.run(args)
    except (ConfigError, ModelNotFoundError) as exc:
        print(f"agentic-rl: error: {exc}", file=sys.stderr)
        return 2
    except TrainingStopped as exc:
        print(f"agentic-rl: {exc}", file=sys.stderr)
        return 1
    except BackendError as exc:  # an endpoint that is down or refuses: no traceback, credentials already masked
        print(f"agentic-rl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agentic-rl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

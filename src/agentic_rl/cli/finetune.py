"""``agentic-rl collect``, ``sft`` and ``dpo``: cold-start data and supervised fine-tuning."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentic_rl.cli.aliases import DeprecatedAlias

PRECISIONS = ("auto", "fp32", "bf16-mixed")
PRECISION_HELP = "precision=fp32 or bf16-mixed (float32 master weights, bf16 compute); auto picks by device (default)"


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
    from agentic_rl.models.loading import resolve_auto_parser
    from agentic_rl.tracking.display import console, trajectory_progress
    from agentic_rl.training.collect import collect_expert, collect_successful

    overrides = apply_assignments({}, args.set or [])
    env_options = overrides.pop("env", {})
    rollout_config = build(RolloutConfig, overrides.pop("rollout", {}))
    config = build(
        CollectConfig,
        {**{k: v for k, v in vars(args).items() if k in CollectConfig.model_fields and v is not None}, **overrides},
    )
    resolve_auto_parser([env_options], args.model)  # parser: auto -> the model's tool-call format
    env_factory(args.env, env_options, split="train")  # fail on bad options before loading the model
    if (
        config.source == "expert"
    ):  # the model's chat template decides the layout (tools in the template or in the system message)
        from agentic_rl.chat import ChatRenderer
        from agentic_rl.models.loading import load_tokenizer

        renderer = ChatRenderer(load_tokenizer(args.model))
        with trajectory_progress(config.num_tasks, "expert") as on_finish:
            result = collect_expert(
                args.env, env_options, config, renderer=renderer, rollout_config=rollout_config, on_trajectory=on_finish
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


def _fine_tune_settings(args: argparse.Namespace) -> tuple[dict, str]:
    """(the section's ``--set`` keys, the precision): ``--set precision=...`` (or the deprecated ``--precision``)."""
    from agentic_rl.config import ConfigError, apply_assignments

    overrides = apply_assignments({}, args.set or [])
    precision = str(overrides.pop("precision", args.precision or "auto"))
    if precision not in PRECISIONS:
        raise ConfigError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    return overrides, precision


def _set_precision(model, setting: str) -> None:
    """Resolve the precision for the loaded model's device and set its compute precision."""
    from agentic_rl.models.precision import apply_precision
    from agentic_rl.tracking.display import console

    resolved = apply_precision(model, setting)
    console.print(f"precision: {resolved.precision} ({resolved.reason})")


def _sft(args: argparse.Namespace) -> int:
    from agentic_rl.config import SFTConfig, build
    from agentic_rl.data import read_jsonl
    from agentic_rl.models import load
    from agentic_rl.tracking.display import console, progress
    from agentic_rl.training.final_model import save_final
    from agentic_rl.training.sft import train_sft

    overrides, precision = _fine_tune_settings(args)
    config = build(SFTConfig, overrides)
    try:
        examples = read_jsonl(args.data)
    except (OSError, ValueError) as exc:
        from agentic_rl.config import ConfigError

        raise ConfigError(f"--data: {exc}") from None
    model, tokenizer = load(args.model)
    _set_precision(model, precision)
    total = config.epochs * -(-len(examples) // config.batch_size)  # at most: too-long conversations are dropped
    with progress(total, "sft") as advance:
        result = train_sft(
            model,
            tokenizer,
            examples,
            config,
            parser=args.parser,
            on_step=lambda m: advance(f"loss {m['loss']:.4f}  lr {m['lr']:.2e}"),
        )
    save_final(model, tokenizer, Path(args.output_dir))
    console.print(
        f"SFT: {result.examples} conversations, {result.steps} steps, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}; saved to {args.output_dir}"
    )
    return 0


def _dpo(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError, DPOConfig, build
    from agentic_rl.data import read_jsonl
    from agentic_rl.models import load
    from agentic_rl.tracking.display import console
    from agentic_rl.training.dpo import pairs_from_rollout_records, train_dpo, validate_pair
    from agentic_rl.training.final_model import save_final

    overrides, precision = _fine_tune_settings(args)
    config = build(DPOConfig, overrides)
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
    _set_precision(model, precision)
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


def register(commands) -> None:
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
    sft.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help=f"SFT options, e.g. epochs=3 or lr=2e-5; {PRECISION_HELP}"
    )
    sft.add_argument("--precision", action=DeprecatedAlias, use="--set precision=...", choices=PRECISIONS)
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
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=f"DPO options, e.g. beta=0.1 or loss_type=ipo; {PRECISION_HELP}",
    )
    dpo.add_argument("--precision", action=DeprecatedAlias, use="--set precision=...", choices=PRECISIONS)
    dpo.set_defaults(run=_dpo)

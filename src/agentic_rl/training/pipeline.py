"""``train(config)``: a whole run, stage by stage, into a run directory.

baseline eval -> [collect + SFT -> eval] -> [difficulty filter] -> RL steps -> final eval
-> ``final/`` (a Hugging Face model folder).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import save_file

from agentic_rl.config import ConfigError, EnvConfig, EvalConfig, TrainConfig, build
from agentic_rl.envs import env_factory
from agentic_rl.evaluation.harness import EvalResult, prepare
from agentic_rl.models import load
from agentic_rl.rollout.backends.hf import HFBackend
from agentic_rl.tracking.diagnostics import check_thresholds
from agentic_rl.tracking.jsonl import JsonlWriter
from agentic_rl.tracking.report import build_report
from agentic_rl.tracking.sinks import MultiSink, make_sinks
from agentic_rl.training.checkpoint import _trainable_state, complete_checkpoints, load_checkpoint, save_checkpoint
from agentic_rl.training.rl import NonFiniteError, RLTrainer


@dataclass
class RunEvents:
    """Display hooks; the training code only calls them."""

    on_config: Callable[[TrainConfig], None] = lambda config: None
    on_stage: Callable[[str], None] = lambda message: None
    on_step: Callable[[dict[str, float]], None] = lambda metrics: None
    on_eval: Callable[[str, EvalResult], None] = lambda name, result: None
    progress: Callable[[int, str], Any] | None = None
    """``progress(total, description)`` -> a context manager yielding a per-trajectory callback."""


@dataclass
class TrainResult:
    run_dir: Path
    evals: dict[str, dict[str, float]]
    steps: list[dict[str, float]]


def _default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _eval_config(config: TrainConfig, output: Path) -> EvalConfig:
    options = {**config.env.options, **config.eval.env}
    return EvalConfig(
        model=config.model,
        env=EnvConfig(name=config.env.name, **options),
        backend=config.backend,
        rollout=config.rollout.model_copy(update={"temperature": config.eval.temperature}),
        num_tasks=config.eval.num_tasks,
        k=config.eval.k,
        split="test",
        seed=config.seed,
        output=str(output),
    )


def _apply_lora(model, config: TrainConfig):
    if not config.lora.enabled:
        return model
    from peft import LoraConfig, get_peft_model

    lora = config.lora
    return get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules, task_type="CAUSAL_LM"))


class TrainingStopped(RuntimeError):
    """The run stopped on purpose (e.g. diverged); a valid checkpoint was written."""


def train(config: TrainConfig | dict[str, Any] | None = None, *, name: str = "custom", events: RunEvents | None = None, loaded=None, resume: str | Path | None = None) -> TrainResult:
    """Run a training job; mirrors ``agentic-rl train``. Returns the run directory and the
    headline numbers. ``loaded``: an already loaded ``(model, tokenizer)`` to train.
    ``resume``: a run directory to continue from its newest complete checkpoint (its own
    config.yaml is used; ``config`` must then be None)."""
    events = events or RunEvents()
    if resume is not None:
        if config is not None:
            raise ConfigError("resume: the run's own config.yaml is used; do not pass a config (or --set) too")
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"--resume: {run_dir} is not a run directory (no config.yaml)")
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        name = saved.pop("recipe", name)
        config = build(TrainConfig, saved)
        checkpoints = complete_checkpoints(run_dir / "checkpoints")
        if not checkpoints:
            raise ConfigError(f"--resume: no complete checkpoint in {run_dir / 'checkpoints'}; the run cannot be resumed")
        checkpoint: Path | None = checkpoints[-1]
    else:
        if not isinstance(config, TrainConfig):
            config = build(TrainConfig, config or {})
        run_dir = Path(config.output_dir) if config.output_dir else _default_run_dir(name)
        if (run_dir / "metrics.jsonl").exists() or (run_dir / "checkpoints").exists():
            raise ConfigError(f"output_dir: {run_dir} already holds a run; choose another directory or --resume it")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump({"recipe": name, **config.model_dump()}, sort_keys=False))
        checkpoint = None
    torch.manual_seed(config.seed)
    events.on_config(config)

    train_env = env_factory(config.env.name, config.env.options, split="train")
    # Validate the eval env before spending minutes on anything.
    env_factory(config.env.name, {**config.env.options, **config.eval.env}, split="test")
    events.on_stage(f"loading {config.model.name}")
    model, tokenizer = loaded or load(config.model.name, device=config.model.device, linear_kernel=config.model.linear_kernel)
    if next(model.parameters()).dtype != torch.float32 and next(model.parameters()).device.type == "cpu":
        model = model.float()
    model = _apply_lora(model, config)
    backend = HFBackend(model, tokenizer, batch_size=config.backend.batch_size)
    evals: dict[str, dict[str, float]] = {}

    def run_eval(label: str, filename: str) -> None:
        events.on_stage(f"evaluating ({label})")
        prepared = prepare(_eval_config(config, run_dir / filename), backend=backend)
        total = prepared.config.num_tasks * prepared.config.samples_per_task
        with (events.progress(total, f"eval {label}") if events.progress else _no_progress()) as on_finish:
            result = prepared.run(on_finish)
        evals[label] = result.metrics
        events.on_eval(label, result)

    task_indices = list(range(config.task_offset, train_env().num_tasks))
    if not task_indices:
        raise ConfigError(f"task_offset: {config.task_offset} leaves no training tasks")
    if checkpoint is None:
        run_eval("before", "eval_before.json")
        if config.sft.enabled:
            _sft_stage(config, model, tokenizer, backend, run_dir, events)
            run_eval("after_sft", "eval_after_sft.json")
        if config.filter.enabled:
            task_indices = _filter_stage(config, backend, train_env, task_indices, run_dir, events)
        if config.dpo.enabled:
            _dpo_stage(config, model, tokenizer, backend, train_env, run_dir, events)
    else:
        for label, filename in (("before", "eval_before.json"), ("after_sft", "eval_after_sft.json")):
            if (run_dir / filename).is_file():
                evals[label] = json.loads((run_dir / filename).read_text())["metrics"]
        if config.filter.enabled:
            task_indices = json.loads((run_dir / "filtered_tasks.json").read_text())["kept"]

    trainer = RLTrainer(config, model, tokenizer, backend, train_env, task_indices)
    logs = {"metrics": run_dir / "metrics.jsonl", "rollouts": run_dir / "rollouts.jsonl"}
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, model=model, optimizer=trainer.optimizer, scheduler=trainer.scheduler, critic=trainer.critic)
        trainer.step_index = state["step"]
        trainer.task_schedule.load_state_dict(state["sampler"])
        for key, path in logs.items():  # drop lines logged after the checkpoint
            _truncate_lines(path, state["tracking"][key])
        events.on_stage(f"resumed from {checkpoint.name} (step {state['step']} of {config.steps})")

    def checkpoint_now() -> None:
        save_checkpoint(
            run_dir / "checkpoints", trainer.step_index, model=model, optimizer=trainer.optimizer, scheduler=trainer.scheduler,
            task_schedule_state=trainer.task_schedule.state_dict(), tracking={k: _count_lines(p) for k, p in logs.items()}, keep=config.keep_checkpoints,
            critic=trainer.critic,
        )

    if checkpoint is None and config.checkpoint_every and (config.sft.enabled or config.filter.enabled or config.dpo.enabled):
        checkpoint_now()  # so a resume never repeats collection, SFT, filtering or DPO
    steps: list[dict[str, float]] = _read_lines(logs["metrics"])
    if trainer.step_index < config.steps:
        events.on_stage(f"RL: {config.steps - trainer.step_index} steps x {config.tasks_per_step} tasks x {config.group_size} samples ({config.algorithm.preset})")
    trainer.response_length_history = [line["response_length"] for line in steps if "response_length" in line]
    sinks = MultiSink(make_sinks(run_dir, ["jsonl", *config.tracking.sinks], start_step=trainer.step_index if checkpoint is not None else None), on_error=events.on_stage)
    with sinks, JsonlWriter(logs["rollouts"]) as rollout_log:
        while trainer.step_index < config.steps:
            try:
                metrics, groups = trainer.step()
            except NonFiniteError as error:
                if config.checkpoint_every:
                    checkpoint_now()
                raise TrainingStopped(f"training stopped at step {trainer.step_index}: {error}; checkpoint kept in {run_dir / 'checkpoints'}") from None
            sinks.log(metrics, int(metrics["step"]))
            for trajectory in [t for g in groups for t in g.trajectories][: config.log_rollouts]:
                rollout_log.write({"step": int(metrics["step"]), **trajectory.to_dict()})
            steps.append(metrics)
            events.on_step(metrics)
            for warning in check_thresholds(metrics, config.tracking.thresholds or None):
                events.on_stage(f"step {int(metrics['step']) + 1}: warning: {warning}")
            if metrics.get("skipped_infra"):
                events.on_stage(f"step {int(metrics['step']) + 1}: skipped the update, too many infrastructure failures ({int(metrics['infra_errors'])})")
            if config.checkpoint_every and trainer.step_index % config.checkpoint_every == 0 and trainer.step_index < config.steps:
                checkpoint_now()

    run_eval("after", "eval_after.json")
    save_final(model, tokenizer, run_dir / "final")
    if trainer.critic is not None:  # the value function, for continuing PPO or inspecting values
        save_file(_trainable_state(trainer.critic.module), run_dir / "final" / "critic.safetensors")
    (run_dir / "summary.json").write_text(json.dumps({"evals": evals, "steps": len(steps)}, indent=2))
    if config.tracking.report:
        try:  # a report problem must never fail a finished training run
            events.on_stage(f"report: {build_report(run_dir)}")
        except Exception as exc:
            events.on_stage(f"report not written: {exc}")
    return TrainResult(run_dir, evals, steps)


def _count_lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.is_file() else 0


def _read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _truncate_lines(path: Path, keep: int) -> None:
    if path.is_file():
        lines = path.read_text().splitlines(keepends=True)[:keep]
        path.write_text("".join(lines))


class _no_progress:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        return None


def _sft_stage(config: TrainConfig, model, tokenizer, backend, run_dir: Path, events: RunEvents) -> None:
    from agentic_rl.data import read_jsonl, write_jsonl
    from agentic_rl.training.collect import collect_successful
    from agentic_rl.training.sft import train_sft

    if config.sft.data:
        examples = read_jsonl(config.sft.data)
        events.on_stage(f"SFT data: {len(examples)} conversations from {config.sft.data}")
    else:
        collect = config.sft.collect
        events.on_stage(f"collecting cold-start data: {collect.num_tasks} tasks x {collect.samples_per_task} samples with {collect.few_shot} demonstrations")
        total = collect.num_tasks * collect.samples_per_task
        with (events.progress(total, "collect") if events.progress else _no_progress()) as on_finish:
            result = collect_successful(backend, config.env.name, config.env.options, collect, seed=config.seed, limits=config.rollout.limits(config.seed), on_trajectory=on_finish)
        examples = result.examples
        write_jsonl(run_dir / "sft_data.jsonl", examples)
        events.on_stage(f"kept {result.successful} successful of {result.attempted} ({result.tasks_with_success} tasks) -> {len(examples)} conversations")
    if not examples:
        raise ConfigError("sft: no successful trajectories to fine-tune on; raise sft.collect.num_tasks or few_shot")
    parser = config.env.options.get("parser", "hermes")
    with JsonlWriter(run_dir / "sft_metrics.jsonl") as log:
        result = train_sft(model, tokenizer, examples, config.sft.train, parser=parser, on_step=log.write)
    events.on_stage(f"SFT: {result.steps} steps, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f} ({result.wall_time_s:.0f} s)")


def _dpo_stage(config: TrainConfig, model, tokenizer, backend, train_env, run_dir: Path, events: RunEvents) -> None:
    from agentic_rl.data import read_jsonl, write_jsonl
    from agentic_rl.training.dpo import collect_pairs, train_dpo, validate_pair

    parser = getattr(train_env(), "parser", None) or "hermes"
    stage = config.dpo
    if stage.data:
        try:
            pairs = read_jsonl(stage.data)
            for index, pair in enumerate(pairs):
                validate_pair(pair, index)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"dpo.data: {exc}") from None
        events.on_stage(f"DPO data: {len(pairs)} preference pairs from {stage.data}")
    else:
        collect = stage.collect
        events.on_stage(f"collecting preference pairs: {collect.num_tasks} tasks x {collect.samples_per_task} samples (best vs worst)")
        limits = dataclasses.replace(config.rollout.limits(config.seed + 11), temperature=collect.temperature)
        tasks = range(collect.task_offset, collect.task_offset + collect.num_tasks)
        with (events.progress(collect.num_tasks * collect.samples_per_task, "pairs") if events.progress else _no_progress()) as on_finish:
            result = collect_pairs(backend, train_env, tasks, samples_per_task=collect.samples_per_task, parser=parser, limits=limits, on_finish=on_finish)
        pairs = result.pairs
        write_jsonl(run_dir / "dpo_pairs.jsonl", pairs)
        events.on_stage(f"{len(pairs)} pairs from {result.groups} groups ({result.tied} with equal rewards skipped)")
    if not pairs:
        raise ConfigError("dpo: no preference pairs (every group had equal rewards); raise dpo.collect.num_tasks or samples_per_task")
    with JsonlWriter(run_dir / "dpo_metrics.jsonl") as log:
        result = train_dpo(model, tokenizer, pairs, stage.train, parser=parser, on_step=log.write)
    events.on_stage(f"DPO: {result.steps} steps on {result.pairs} pairs, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}, margin {result.margins[-1]:+.3f} ({result.wall_time_s:.0f} s)")


def _filter_stage(config: TrainConfig, backend, train_env, task_indices: list[int], run_dir: Path, events: RunEvents) -> list[int]:
    from agentic_rl.training.difficulty import difficulty_filter

    candidates = task_indices[: config.filter.num_tasks]
    events.on_stage(f"difficulty filter: {len(candidates)} tasks x {config.filter.samples_per_task} samples")
    result = difficulty_filter(
        backend, train_env, candidates,
        samples_per_task=config.filter.samples_per_task,
        min_pass_rate=config.filter.min_pass_rate, max_pass_rate=config.filter.max_pass_rate,
        limits=config.rollout.limits(config.seed + 7),
    )
    (run_dir / "filtered_tasks.json").write_text(json.dumps(result.to_dict(), indent=2))
    events.on_stage(f"kept {len(result.kept)} of {len(candidates)} tasks; pass-rate histogram {result.histogram}")
    if not result.kept:
        raise ConfigError("filter: no task has a pass rate inside the band; widen filter.min_pass_rate / max_pass_rate")
    return result.kept


def save_final(model, tokenizer, folder: Path) -> None:
    """A plain Hugging Face folder that ``transformers`` loads (LoRA adapters merged)."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

"""The stages of a training run, each a function of the shared ``RunState``.

baseline eval -> [collect + SFT -> eval] -> [difficulty filter] -> [DPO] -> RL -> eval
-> final model -> report. ``pipeline.train`` runs them in order over a ``RunDirectory``;
a finished stage is recorded there, and a resumed run restores a recorded stage's
outputs (``restore``) instead of running it again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl.config import ConfigError, EnvConfig, EvalConfig, TrainConfig
from agentic_rl.distributed import DistContext
from agentic_rl.evaluation.harness import EvalResult, prepare
from agentic_rl.seeds import derive_seed
from agentic_rl.tracking.jsonl import JsonlWriter
from agentic_rl.training.run_checkpoints import TrainingStopped, checkpoint_run, resume_trainer
from agentic_rl.training.run_dir import RunDirectory


@dataclass
class RunEvents:
    """Display hooks; the training code only calls them."""

    on_config: Callable[[TrainConfig], None] = lambda config: None
    on_stage: Callable[[str], None] = lambda message: None
    on_step: Callable[[dict[str, float]], None] = lambda metrics: None
    on_eval: Callable[[str, EvalResult], None] = lambda name, result: None
    progress: Callable[..., Any] | None = None
    """``progress(total, description, transient=False)`` -> a context manager yielding a callback
    per finished item: a trajectory, or a training step's metrics dict (SFT, DPO)."""

    def progress_bar(self, total: int, description: str, *, transient: bool = False):
        return self.progress(total, description, transient=transient) if self.progress else _NoProgress()


class _NoProgress:
    def __enter__(self):
        return lambda item: None

    def __exit__(self, *exc) -> None:
        return None


@dataclass
class RunState:
    """What the stages share: the config, the run directory, the policy and its engine."""

    config: TrainConfig
    run: RunDirectory
    events: RunEvents
    model: Any
    tokenizer: Any
    backend: Any
    train_env: Callable
    task_indices: list[int]
    evals: dict[str, dict[str, float]] = field(default_factory=dict)
    steps: list[dict[str, float]] = field(default_factory=list)
    checkpoint: Path | None = None
    """The checkpoint a resumed run continues from."""
    trainer: Any = None
    dist: DistContext = field(default_factory=DistContext)
    """The data-parallel ranks (rank 0 writes checkpoints, the final model and the report)."""
    checkpoints_root: Path | None = None
    """Rank 0's checkpoint folder, where every rank writes its shards of a sharded checkpoint."""


# --- evaluation ----------------------------------------------------------------------


def eval_env_options(config: TrainConfig) -> dict:
    """The held-out env's options: the training env's with ``eval.env`` on top (for a mix, on
    top of each entry's); the default ``few_shot: 0`` (zero-shot evaluation) only for envs
    that take demonstrations."""
    return _stage_env_options(config, config.eval.env)


def sft_env_options(config: TrainConfig) -> dict:
    """The cold-start collection env's options: the training env's with ``sft.env`` on top."""
    return _stage_env_options(config, config.sft.env)


def _stage_env_options(config: TrainConfig, overrides: dict) -> dict:
    if config.env.is_mix:  # each entry's options, with the overrides on top of each
        return {"mix": [_merged_options(entry["name"], entry, overrides) for entry in config.env.options["mix"]]}
    return _merged_options(config.env.name, config.env.options, overrides)


def _merged_options(name: str, options: dict, overrides: dict) -> dict:
    from agentic_rl import envs

    merged = {**options, **overrides}
    if merged.get("few_shot") == 0 and "few_shot" not in options and not envs.accepts_option(name, "few_shot"):
        del merged["few_shot"]
    return merged


def eval_config(config: TrainConfig, output: Path) -> EvalConfig:
    """The held-out evaluation a training run does: test split, ``eval`` section's options."""
    options = eval_env_options(config)
    return EvalConfig(
        model=config.model,
        env=EnvConfig(name=config.env.name, **options),
        backend=config.backend,
        rollout=config.rollout.model_copy(update={"temperature": config.eval.temperature}),
        num_tasks=config.eval.num_tasks,
        k=config.eval.k,
        split="test",
        seed=derive_seed(config.seed, "run"),
        output=str(output),
    )


def evaluation(label: str) -> tuple[Callable[[RunState], None], Callable[[RunState], None]]:
    """(run, restore) of the held-out evaluation ``label`` (written to eval_<label>.json)."""
    filename = f"eval_{label}.json"

    def run(state: RunState) -> None:
        state.events.on_stage(f"evaluating ({label})")
        prepared = prepare(eval_config(state.config, state.run.file(filename)), backend=state.backend)
        # With several ranks each samples its share of the tasks; the bar counts rank 0's.
        total = len(prepared.tasks_of(state.dist.rank, state.dist.world_size)) * prepared.config.samples_per_task
        with state.events.progress_bar(total, f"eval {label}") as on_finish:
            result = prepared.run(on_finish, dist=state.dist)
        state.evals[label] = result.metrics
        state.events.on_eval(label, result)

    def restore(state: RunState) -> None:
        if state.run.file(filename).is_file():
            state.evals[label] = state.run.read_json(filename)["metrics"]

    return run, restore


# --- SFT cold start, difficulty filter, DPO -------------------------------------------


def _sft_examples(state: RunState) -> list[dict]:
    """The cold start's conversations: read from ``sft.data``, played by the env's expert,
    or the policy's own successful samples (written to the run's ``sft_data.jsonl``)."""
    from agentic_rl.chat import ChatRenderer
    from agentic_rl.data import read_jsonl, write_jsonl
    from agentic_rl.training.collect import (
        collect_expert,
        collect_expert_mix,
        collect_positions,
        collect_successful,
        collect_successful_mix,
        mix_shares,
    )

    config, events = state.config, state.events
    if config.sft.data:
        examples = read_jsonl(config.sft.data)
        events.on_stage(f"SFT data: {len(examples)} conversations from {config.sft.data}")
    elif config.sft.collect.source == "expert":
        collect = config.sft.collect
        events.on_stage(f"collecting cold-start data: the env's expert on {collect.num_tasks} tasks")
        with events.progress_bar(collect.num_tasks, "expert") as on_finish:
            settings = dict(
                renderer=ChatRenderer(state.tokenizer), rollout_config=config.rollout, on_trajectory=on_finish
            )
            if config.env.is_mix:  # num_tasks split by the weights
                result = collect_expert_mix(sft_env_options(config)["mix"], collect, **settings)
            else:
                result = collect_expert(config.env.name, sft_env_options(config), collect, **settings)
        examples = result.examples
        write_jsonl(state.run.file("sft_data.jsonl"), examples)
        events.on_stage(
            f"kept {result.successful} correct expert episodes of {result.attempted} -> {len(examples)} conversations"
        )
    else:
        collect = config.sft.collect
        events.on_stage(
            f"collecting cold-start data: {collect.num_tasks} tasks x {collect.samples_per_task} samples with {collect.few_shot} demonstrations"
        )
        # A mix collects on each entry, num_tasks split by weight.
        options = sft_env_options(config)
        shares = [share for _, _, share in mix_shares(options["mix"], collect)] if config.env.is_mix else [collect]
        # With several ranks each samples its share of the tasks; the bar counts rank 0's.
        with events.progress_bar(
            sum(len(collect_positions(share, state.dist)) for share in shares) * collect.samples_per_task, "collect"
        ) as on_finish:
            settings = dict(
                seed=derive_seed(config.seed, "run"),
                rollout_config=config.rollout,
                on_trajectory=on_finish,
                dist=state.dist,
            )
            if config.env.is_mix:
                result = collect_successful_mix(state.backend, options["mix"], collect, **settings)
            else:
                result = collect_successful(state.backend, config.env.name, options, collect, **settings)
        examples = result.examples
        write_jsonl(state.run.file("sft_data.jsonl"), examples)
        events.on_stage(
            f"kept {result.successful} correct of {result.attempted} ({result.tasks_with_success} tasks) -> {len(examples)} conversations"
        )
    return examples


def run_sft(state: RunState) -> None:
    from agentic_rl.training.sft import train_sft

    config, events = state.config, state.events
    parser = sft_parser(config)  # before collecting: a mix whose entries disagree fails first
    examples = _sft_examples(state)
    if not examples:
        raise ConfigError("sft: no successful trajectories to fine-tune on; raise sft.collect.num_tasks or few_shot")
    steps = config.sft.train.epochs * -(-len(examples) // config.sft.train.batch_size)  # fewer if some are too long
    with JsonlWriter(state.run.file("sft_metrics.jsonl")) as log, events.progress_bar(steps, "SFT") as advance:
        try:
            result = train_sft(
                state.model,
                state.tokenizer,
                examples,
                config.sft.train,
                parser=parser,
                on_step=lambda record: (log.write(record), advance(record)),
                dist=state.dist,
            )
        except ValueError as error:
            if str(error).startswith("max_length:"):
                raise ConfigError(f"sft.train.{error}") from None
            raise
    state.backend.sync_weights(state.model)
    events.on_stage(
        f"SFT: {result.steps} steps, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f} ({result.wall_time_s:.0f} s)"
    )


def sft_parser(config: TrainConfig) -> str:
    """The tool-call format SFT renders the conversations in: the env's ``parser`` option
    (hermes by default); a mix's entries must agree on it."""
    if not config.env.is_mix:
        return config.env.options.get("parser", "hermes")
    parsers = sorted({entry.get("parser", "hermes") for entry in config.env.options["mix"]})
    if len(parsers) > 1:
        raise ConfigError(
            f"env.mix: SFT renders every entry's conversations in one tool-call format; the entries use {', '.join(parsers)}"
        )
    return parsers[0]


def run_filter(state: RunState) -> None:
    from agentic_rl.training.difficulty import difficulty_filter

    config = state.config
    candidates = state.task_indices[: config.filter.num_tasks]
    state.events.on_stage(f"difficulty filter: {len(candidates)} tasks x {config.filter.samples_per_task} samples")
    result = difficulty_filter(
        state.backend,
        state.train_env,
        candidates,
        samples_per_task=config.filter.samples_per_task,
        min_pass_rate=config.filter.min_pass_rate,
        max_pass_rate=config.filter.max_pass_rate,
        rollout_config=config.rollout,
        seed=derive_seed(config.seed, "filter"),
    )
    state.run.write_json("filtered_tasks.json", result.to_dict())
    state.events.on_stage(f"kept {len(result.kept)} of {len(candidates)} tasks; pass-rate histogram {result.histogram}")
    if not result.kept:
        raise ConfigError("filter: no task has a pass rate inside the band; widen filter.min_pass_rate / max_pass_rate")
    state.task_indices = result.kept


def restore_filter(state: RunState) -> None:
    state.task_indices = state.run.read_json("filtered_tasks.json")["kept"]


def run_dpo(state: RunState) -> None:
    from agentic_rl.data import read_jsonl, write_jsonl
    from agentic_rl.training.dpo import collect_pairs, train_dpo, validate_pair

    config, events, stage = state.config, state.events, state.config.dpo
    parser = getattr(state.train_env(), "parser", None) or "hermes"
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
        events.on_stage(
            f"collecting preference pairs: {collect.num_tasks} tasks x {collect.samples_per_task} samples (best vs worst)"
        )
        sampling = config.rollout.model_copy(update={"temperature": collect.temperature})
        tasks = list(range(collect.task_offset, collect.task_offset + collect.num_tasks))
        # With several ranks each samples its share of the tasks; the bar counts rank 0's.
        with events.progress_bar(
            len(tasks[state.dist.rank :: state.dist.world_size]) * collect.samples_per_task, "pairs"
        ) as on_finish:
            result = collect_pairs(
                state.backend,
                state.train_env,
                tasks,
                samples_per_task=collect.samples_per_task,
                parser=parser,
                rollout_config=sampling,
                seed=derive_seed(config.seed, "dpo-pairs"),
                on_finish=on_finish,
                dist=state.dist,
            )
        pairs = result.pairs
        write_jsonl(state.run.file("dpo_pairs.jsonl"), pairs)
        events.on_stage(f"{len(pairs)} pairs from {result.groups} groups ({result.tied} with equal rewards skipped)")
    if not pairs:
        raise ConfigError(
            "dpo: no preference pairs (every group had equal rewards); raise dpo.collect.num_tasks or samples_per_task"
        )
    steps = stage.train.epochs * -(-len(pairs) // stage.train.batch_size)
    with JsonlWriter(state.run.file("dpo_metrics.jsonl")) as log, events.progress_bar(steps, "DPO") as advance:
        on_step = lambda record: (log.write(record), advance(record))  # noqa: E731
        result = train_dpo(
            state.model, state.tokenizer, pairs, stage.train, parser=parser, on_step=on_step, dist=state.dist
        )
    state.backend.sync_weights(state.model)
    events.on_stage(
        f"DPO: {result.steps} steps on {result.pairs} pairs, loss {result.losses[0]:.3f} -> {result.losses[-1]:.3f}, margin {result.margins[-1]:+.3f} ({result.wall_time_s:.0f} s)"
    )


# --- RL ------------------------------------------------------------------------------


def run_rl(state: RunState) -> None:
    from agentic_rl.envs import mixed_spec_of
    from agentic_rl.training.rl import RLTrainer
    from agentic_rl.training.task_schedule import TaskPools

    config = state.config
    mix = mixed_spec_of(state.train_env())
    pools = TaskPools(mix.pools(state.task_indices), mix.weights) if mix is not None else None
    rollouts = _ray_rollouts(state) if config.distributed.engine == "ray" else None
    try:
        state.trainer = RLTrainer(
            config,
            state.model,
            state.tokenizer,
            rollouts or state.backend,
            state.train_env,
            state.task_indices,
            dist=state.dist,
            task_pools=pools,
        )
    except ValueError as exc:  # a setting the trainer cannot run with (e.g. on several ranks)
        if rollouts is not None:
            rollouts.close()
        raise ConfigError(str(exc)) from None
    try:
        _run_rl_steps(state)
    finally:
        state.trainer.close()
        if rollouts is not None:
            rollouts.close()


def _ray_rollouts(state: RunState):
    """Rollout workers on Ray (distributed.engine: ray), loaded with the policy as it is now;
    with several trainer ranks, rank 0 holds them (the others receive its groups)."""
    from agentic_rl.distributed.ray_rollouts import RayRollouts, RolloutsOnRankZero
    from agentic_rl.models.precision import compute_precision

    if not state.dist.is_main:
        return RolloutsOnRankZero()
    settings = state.config.distributed
    mode = "sync" if settings.max_staleness is None else f"async, max_staleness {settings.max_staleness}"
    state.events.on_stage(f"starting {settings.rollout_workers} Ray rollout worker(s) ({mode})")
    rollouts = RayRollouts(state.config, state.model, precision=compute_precision(state.model))
    try:
        nodes = sorted({worker["node"] for worker in rollouts.info()})  # waits until every worker has loaded its engine
    except Exception as error:
        rollouts.close()
        raise ConfigError(
            f"distributed: a rollout worker failed to start: {type(error).__name__}: {str(error).strip().splitlines()[-1] if str(error).strip() else ''}"
        ) from None
    state.events.on_stage(f"rollout workers ready on {', '.join(nodes)}")
    return rollouts


def _run_rl_steps(state: RunState) -> None:
    config, rl = state.config, state.config.rl
    if state.checkpoint is not None:
        resume_trainer(state)
    elif config.checkpoint_every and (config.sft.enabled or config.filter.enabled or config.dpo.enabled):
        checkpoint_run(state)  # so a resume never repeats collection, SFT, filtering or DPO
    state.steps = state.run.read_lines("metrics.jsonl")
    if (left := rl.steps - state.trainer.steps_done) > 0:
        state.events.on_stage(
            f"RL: {left} steps x {rl.tasks_per_step} tasks x {rl.group_size} samples ({config.algorithm.preset})"
        )
    _rl_loop(state)


def _rl_loop(state: RunState) -> None:
    from agentic_rl.tracking.diagnostics import check_thresholds
    from agentic_rl.tracking.sinks import MultiSink, make_sinks
    from agentic_rl.training.optim import NonFiniteError

    config, trainer, events = state.config, state.trainer, state.events
    names = (
        ["jsonl", *config.tracking.sinks] if state.dist.is_main else []
    )  # one metrics log, one TensorBoard, one W&B run
    sinks = MultiSink(
        make_sinks(state.run.path, names, start_step=trainer.steps_done if state.checkpoint is not None else None),
        on_error=events.on_stage,
    )
    # A step's rollouts on a terminal, where this process runs them group by group (not Ray, async or ARPO).
    local = config.distributed.engine != "ray" and config.distributed.max_staleness is None
    local = local and trainer.sampler is None and config.rl.sampling == "group"
    shown = config.rl.tasks_per_step * config.rl.group_size if local else 0
    with sinks, JsonlWriter(state.run.file("rollouts.jsonl")) as rollout_log:
        while trainer.steps_done < config.rl.steps:
            try:
                with events.progress_bar(shown, "rollouts", transient=True) if shown else _NoProgress() as bar:
                    trainer.on_trajectory = bar
                    metrics, groups = trainer.step()
            except NonFiniteError as error:
                if config.checkpoint_every:
                    checkpoint_run(state)
                raise TrainingStopped(
                    f"training stopped at step {trainer.steps_done}: {error}; checkpoint kept in {state.run.checkpoints}"
                ) from None
            step = int(metrics["step"])
            sinks.log(metrics, step)
            for trajectory in [t for g in groups for t in g.trajectories][: config.rl.log_rollouts]:
                rollout_log.write({"step": step, **trajectory.to_dict()})
            state.steps.append(metrics)
            events.on_step(metrics)
            for warning in check_thresholds(metrics, config.tracking.thresholds or None):
                events.on_stage(f"step {step + 1}: warning: {warning}")
            if metrics.get("skipped_infra"):
                events.on_stage(
                    f"step {step + 1}: skipped the update, too many infrastructure failures ({int(metrics['infra_errors'])})"
                )
            if (
                config.checkpoint_every
                and trainer.steps_done % config.checkpoint_every == 0
                and trainer.steps_done < config.rl.steps
            ):
                checkpoint_run(state)


# --- outputs -------------------------------------------------------------------------


def run_final(state: RunState) -> None:
    """final/ (a Hugging Face folder, plus the critic when there is one) and summary.json."""
    from safetensors.torch import save_file

    from agentic_rl.training.checkpoint import final_dtype, save_final

    final = state.run.file("final")
    # A sharded trainer's weights are gathered on every rank (a collective); rank 0 saves them.
    weights = state.trainer.strategy.full_weights(state.model) if state.trainer is not None else state.model
    critic = state.trainer.critic if state.trainer is not None else None
    critic_weights = _full_critic_state(critic) if critic is not None else None  # a collective when sharded
    if not state.dist.is_main:
        return
    model, gathered = state.model, weights if isinstance(weights, dict) else None
    if gathered is not None and hasattr(model, "merge_and_unload"):
        # Sharded LoRA: peft merges an unsharded model; the engine's full copy holds the same weights.
        model, gathered = state.backend.model, None
    save_final(
        model,
        state.tokenizer,
        final,
        state_dict=gathered,
        dtype=final_dtype(state.config.final_dtype, state.config.model.name),
    )
    if critic_weights is not None:  # the value function, for continuing PPO or inspecting values
        save_file(critic_weights, final / "critic.safetensors")
    state.run.write_json("summary.json", {"evals": state.evals, "steps": len(state.steps)})


def _full_critic_state(critic) -> dict:
    """The critic's weights as one-process tensors (a sharded critic's gathered on every rank)."""
    from agentic_rl.training.checkpoint import trainable_state

    if not critic.sharded:
        return trainable_state(critic.module)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    # The gathered dict names tied weights twice (lm_head and the embedding); keep the
    # one-process file's names: each parameter once.
    names = {name for name, _ in critic.module.named_parameters()}
    full = get_model_state_dict(critic.module, options=StateDictOptions(full_state_dict=True))
    return {name: value.contiguous() for name, value in full.items() if name in names}


def run_report(state: RunState) -> None:
    from agentic_rl.tracking.report import build_report

    if not state.dist.is_main:
        return
    try:  # a report problem must never fail a finished training run
        state.events.on_stage(f"report: {build_report(state.run.path)}")
    except Exception as exc:
        state.events.on_stage(f"report not written: {exc}")

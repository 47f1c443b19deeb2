"""The stages that prepare the policy before RL: SFT cold start, difficulty filter, DPO.

Each is a function of the run's shared ``RunState`` (training/stages.py), run by
``pipeline.train`` when its config section is enabled. The cold start collects or reads
conversations and fine-tunes on them, the filter keeps the tasks whose pass rate lies in
a band, and DPO trains on preference pairs; each hands the policy (and the task list)
forward to the next stage.
"""

from __future__ import annotations

from agentic_rl.config import ConfigError, TrainConfig
from agentic_rl.models.lora import seed_role_adapters
from agentic_rl.seeds import derive_seed
from agentic_rl.tracking.jsonl import JsonlWriter
from agentic_rl.training.stages import RunState, sft_env_options


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
    if config.lora.roles:  # the cold start trained the shared adapter: each role's starts from it
        seed_role_adapters(state.model, config.lora)
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

"""``train(config)``: a whole run, stage by stage, into a run directory.

The stages (training/stages.py, pre_rl_stages.py, rl_stage.py) run in order; each enabled
stage that finishes is recorded in the run directory. ``resume`` continues a run from its
newest complete checkpoint: the stages that checkpoint covers are restored from their
files, not run again, and RL continues from the checkpoint's step. ``overrides`` change
what may change mid-run (config/resume.py: steps, learning rate and schedule, eval,
tracking, checkpointing); the run's config.yaml records them for a later resume.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from agentic_rl import envs
from agentic_rl.accel import release_memory
from agentic_rl.config import ConfigError, TrainConfig, build, redact_url, resume_config
from agentic_rl.distributed import DEFAULT_TIMEOUT_S, DistContext, init_distributed, shutdown
from agentic_rl.distributed.shared_server import shared_server_backend
from agentic_rl.engines.factory import build_backend
from agentic_rl.models import load, resolve_device
from agentic_rl.models.lora import adapter_for_role, add_role_adapters, apply_lora
from agentic_rl.models.precision import apply_precision
from agentic_rl.training.checkpoint import usable_checkpoint
from agentic_rl.training.pre_rl_stages import restore_filter, run_dpo, run_filter, run_sft
from agentic_rl.training.preflight import Preflight, preflight, resolve_parser
from agentic_rl.training.rl_stage import run_rl
from agentic_rl.training.run_checkpoints import TrainingStopped
from agentic_rl.training.run_dir import RunDirectory
from agentic_rl.training.stages import RunEvents, RunState, evaluation, run_final, run_report

__all__ = ["STAGES", "RunEvents", "Stage", "TrainResult", "TrainingStopped", "train"]


@dataclass(frozen=True)
class Stage:
    name: str
    enabled: Callable[[TrainConfig], bool]
    run: Callable[[RunState], None]
    restore: Callable[[RunState], None] | None = None
    """Reload a finished stage's outputs on resume (None: the stage always runs)."""


def _always(config: TrainConfig) -> bool:
    return True


_before, _restore_before = evaluation("before")
_after_sft, _restore_after_sft = evaluation("after_sft")
_after, _ = evaluation("after")

STAGES: tuple[Stage, ...] = (
    Stage("eval_before", _always, _before, _restore_before),
    Stage("sft", lambda c: c.sft.enabled, run_sft, lambda state: None),
    Stage("eval_after_sft", lambda c: c.sft.enabled, _after_sft, _restore_after_sft),
    Stage("filter", lambda c: c.filter.enabled, run_filter, restore_filter),
    Stage("dpo", lambda c: c.dpo.enabled, run_dpo, lambda state: None),
    Stage("rl", _always, run_rl),  # resumes from the checkpoint's step by itself
    Stage("eval_after", _always, _after),
    Stage("final", _always, run_final),
    Stage("report", lambda c: c.tracking.report, run_report),
)
"""A run, in order. Checkpoints are written by the RL stage (at its start when an earlier
stage changed the model, then every ``checkpoint_every`` steps) and record the stages
finished before them: those are the stages a resumed run restores instead of running."""

_BEFORE_RL = ("eval_before", "sft", "eval_after_sft", "filter", "dpo")


@dataclass
class TrainResult:
    run_dir: Path
    evals: dict[str, dict[str, float]]
    steps: list[dict[str, float]]


def _open_run(
    config, name: str, resume, overrides, dist: DistContext, loaded=None
) -> tuple[TrainConfig, str, RunDirectory, Path | None, list[str], Path, list[str], Preflight]:
    """(config, recipe name, run directory, checkpoint to resume from, stages it covers,
    the run directory's path on every rank, the overrides' changes, what the checks found:
    a new run's directory is created only once they all passed). Rank 0 owns the run
    directory; other ranks write what they must into a scratch one (and their checkpoint
    shards into rank 0's). ``parser: auto`` in the env options becomes the model's format
    here, before any env is built (a new run's config.yaml records the format chosen)."""
    if overrides and resume is None:
        raise ConfigError("overrides: only for a resumed run (a new run takes them in its config)")
    if resume is None:
        if not isinstance(config, TrainConfig):
            config = build(TrainConfig, config or {})
        resolve_parser(config, loaded)
        checked = preflight(config, check_model=loaded is None)
        run = (
            RunDirectory.create(config.output_dir, name=name, config=config.model_dump())
            if dist.is_main
            else RunDirectory.scratch(dist.rank)
        )
        shared = Path(dist.broadcast_object(str(run.path)))  # the other ranks wait here until the directory exists
        return config, name, run, None, [], shared, [], checked
    if config is not None:
        raise ConfigError(
            "resume: the run's own config.yaml is used; pass overrides, not a config, to change what may change mid-run"
        )
    run, name, saved = RunDirectory.existing(resume)
    config, changed = resume_config(saved, overrides)
    resolve_parser(config, loaded)
    checked = preflight(config, check_model=loaded is None)
    checkpoint = usable_checkpoint(run.checkpoints)  # the newest whole one: a corrupt newest falls back, with a warning
    if checkpoint is None:
        raise ConfigError(f"--resume: no complete checkpoint in {run.checkpoints}; the run cannot be resumed")
    if changed and dist.is_main:
        run.write_config(name, config.model_dump())  # a later resume (or an elastic restart) continues with them
    info = RunDirectory(checkpoint).read_json("state.json")
    shared = run.path
    if not dist.is_main:
        run = RunDirectory.scratch(dist.rank)
    # Checkpoints written before stages were recorded came only from the RL stage: every stage before it had finished.
    return config, name, run, checkpoint, info.get("stages", list(_BEFORE_RL)), shared, changed, checked


def _timeout(config, resume) -> float:
    """The collective timeout of the run about to start (its config may be unbuilt yet)."""
    try:
        if resume is not None:
            return build(TrainConfig, RunDirectory.existing(resume)[2]).trainer.timeout_s  # overrides never change it
        return (config if isinstance(config, TrainConfig) else build(TrainConfig, config or {})).trainer.timeout_s
    except ConfigError:
        return DEFAULT_TIMEOUT_S  # _open_run reports the problem


def train(
    config: TrainConfig | dict[str, Any] | None = None,
    *,
    name: str = "custom",
    events: RunEvents | None = None,
    loaded=None,
    resume: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    stages: Collection[str] | None = None,
    env: str | Callable[..., Any] | None = None,
) -> TrainResult:
    """Run a training job; mirrors ``agentic-rl train``. Returns the run directory and the
    headline numbers. ``env``: the env to train on, as a registered name, an import path or
    the factory itself (a class or function returning an Env: ``train(config, env=make_env)``);
    the config's ``env`` section then holds only its options. ``loaded``: an already loaded
    ``(model, tokenizer)`` to train.
    ``resume``: a run directory to continue from its newest complete checkpoint (its own
    config.yaml is used; ``config`` must then be None). ``overrides``: with ``resume``,
    nested config values that may change mid-run (``{"rl": {"steps": 20}, "optim": {"lr": 1e-6}}``;
    ``agentic_rl.config.resume.RESUMABLE_KEYS``), also written to the run's config.yaml.
    ``stages``: run only these of ``STAGES`` (by name; each still only when its config enables
    it), for a new run: e.g. the cold start alone, ``("sft", "eval_after_sft", "final")``.
    Under torchrun every rank calls this; rank 0 writes the run directory and shows ``events``."""
    only = _checked_stages(stages, resume)
    if env is not None:
        config = with_env(config, env, resume)
    dist = init_distributed(_timeout(config, resume))
    try:
        return _train(config, name, events if dist.is_main else RunEvents(), loaded, resume, overrides, dist, only)
    finally:
        if dist.distributed:
            shutdown()


def _checked_stages(stages: Collection[str] | None, resume) -> frozenset[str] | None:
    if stages is None:
        return None
    names = [stage.name for stage in STAGES]
    unknown = [name for name in stages if name not in names]
    if unknown:
        raise ValueError(f"stages: unknown stage {unknown[0]!r}; stages: {', '.join(names)}")
    if resume is not None:
        raise ValueError(
            "stages: only for a new run (a resumed run restores or runs the stages its checkpoint implies)"
        )
    return frozenset(stages)


def _report_sandbox(checked: Preflight, events: RunEvents, run: RunDirectory) -> None:
    """Where the env runs model-written code (checked before the run started: ``required``
    refused there), say what is missing (best-effort). Never a silent fallback: what was
    verified and what is missing is also written to the run's sandbox.json."""
    from agentic_rl import sandbox
    from agentic_rl.sandbox.policy import missing

    sandbox.hide_path(run.path)  # config, checkpoints, rollouts: nothing for the model's code
    if checked.sandbox is None:
        return
    info, warnings = checked.sandbox
    for warning in warnings:
        events.on_stage(f"warning: {warning}")
    events.on_stage(f"sandbox: {info.describe()} ({sandbox.isolation_mode()})")
    run.write_json(
        "sandbox.json", {"mode": sandbox.isolation_mode(), "missing": missing(info), "isolation": info.to_dict()}
    )


def with_env(config: TrainConfig | dict[str, Any] | None, env: str | Callable[..., Any], resume) -> Any:
    """``config`` training on ``env`` (see :func:`train`); ConfigError when the config names
    another env or the run is resumed (a resumed run keeps its env)."""
    if resume is not None:
        raise ConfigError("env: a resumed run trains on the env in its config.yaml; leave env out")
    name = env if isinstance(env, str) else envs.name_for(env)
    if isinstance(config, TrainConfig):
        given = config.env.name if "name" in config.env.model_fields_set else None
        updated = config.model_copy(update={"env": config.env.model_copy(update={"name": name})})
    else:
        data = copy.deepcopy(config or {})
        given = (data.get("env") or {}).get("name")
        data.setdefault("env", {})["name"] = name
        updated = data
    if given is not None and given != name:
        raise ConfigError(f"env: given as an argument ({name}) and in the config (env.name {given}); keep one")
    return updated


def _train(
    config,
    name: str,
    events: RunEvents | None,
    loaded,
    resume,
    overrides,
    dist: DistContext,
    only: frozenset[str] | None = None,
) -> TrainResult:
    events = events or RunEvents()
    config, name, run, checkpoint, finished, shared, changed, checked = _open_run(
        config, name, resume, overrides, dist, loaded
    )
    if not dist.is_main:
        import atexit
        import shutil

        atexit.register(shutil.rmtree, run.path, True)
    torch.manual_seed(config.seed)
    events.on_config(config)
    for change in changed:
        events.on_stage(f"resume: {change}")

    train_env, task_indices = checked.train_env, checked.task_indices
    _report_sandbox(checked, events, run)
    events.on_stage(f"loading {config.model.name}")
    model, tokenizer = loaded or load(
        config.model.name,
        device=str(dist.device(resolve_device(config.model.device))),
        linear_kernel=config.model.linear_kernel,
    )
    if next(model.parameters()).dtype != torch.float32:
        model = model.float()  # float32 master weights always; bf16 is a compute choice (precision)
    precision = apply_precision(model, config.precision)
    run.write_json(
        "precision.json", {"setting": config.precision, "precision": precision.precision, "reason": precision.reason}
    )
    events.on_stage(f"precision: {precision.precision} ({precision.reason})")
    model = add_role_adapters(apply_lora(model, config.lora), config.lora)
    backend = _engine(config, (model, tokenizer), precision.precision, dist, events)
    if config.lora.roles:  # each role's turns sampled with its adapter (an env's roles)
        backend.adapter_for = partial(adapter_for_role, config.lora.roles)
    try:
        state = RunState(
            config,
            run,
            events,
            model,
            tokenizer,
            backend,
            train_env,
            task_indices,
            checkpoint=checkpoint,
            dist=dist,
            checkpoints_root=RunDirectory(shared).checkpoints,
        )
        for stage in STAGES:
            if not stage.enabled(config) or (only is not None and stage.name not in only):
                continue
            if stage.name in finished and stage.restore is not None:
                stage.restore(state)
            else:
                stage.run(state)
            run.mark_complete(stage.name)
            release_memory()  # the next stage allocates other shapes: hand this one's free heap back
    finally:
        backend.close()  # e.g. stops a managed vLLM server
    return TrainResult(run.path, state.evals, state.steps)


def _engine(config: TrainConfig, loaded, precision: str, dist: DistContext, events: RunEvents):
    """The run's inference engine on the trainer's model (``loaded``: model, tokenizer)."""
    if config.backend.kind == "vllm":
        events.on_stage(
            "starting the vLLM server (the first start compiles: minutes)"
            if not config.backend.base_url
            else f"connecting to the vLLM server at {redact_url(config.backend.base_url)}"
        )
        if dist.distributed:  # one server for every rank, rank 0 pushes
            return shared_server_backend(config.backend, config.model, loaded=loaded, precision=precision, dist=dist)
    # A sharded trainer's parameters cannot decode: its engine holds a full copy.
    own_copy = config.trainer.strategy == "fsdp2"
    return build_backend(config.backend, config.model, loaded=loaded, precision=precision, own_copy=own_copy)

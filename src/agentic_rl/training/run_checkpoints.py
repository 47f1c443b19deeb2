"""A training run's RL checkpoints: written at the configured steps (and before stopping),
and loaded back into the trainer on ``--resume`` with the logs and memory stores they
recorded. ``state`` is the run's ``stages.RunState``."""

from __future__ import annotations

from agentic_rl.config import ConfigError

LOGS = ("metrics.jsonl", "rollouts.jsonl")


class TrainingStopped(RuntimeError):
    """The run stopped on purpose (e.g. diverged); a valid checkpoint was written."""


def checkpoint_run(state) -> None:
    from agentic_rl.training.checkpoint import CheckpointError

    try:
        write_checkpoint(state)
    except CheckpointError as error:  # e.g. a full disk: one line, the previous checkpoint kept
        raise TrainingStopped(str(error)) from None


def write_checkpoint(state) -> None:
    from agentic_rl.tools.memory_store import shared_stores_state
    from agentic_rl.training.checkpoint import save_checkpoint

    trainer = state.trainer
    info = {"tracking": {name: state.run.count_lines(name) for name in LOGS}, "stages": state.run.completed_stages()}
    if memory := shared_stores_state():  # env.memory: shared: the notes the agents keep across episodes
        info["memory"] = memory
    workers = getattr(trainer.backend, "memory_state", None)  # Ray rollout workers keep their own stores
    if workers is not None and any(worker_memory := workers()):
        info["worker_memory"] = worker_memory
    if trainer.strategy.sharded:  # every rank writes its shards
        from agentic_rl.training.sharded_checkpoint import save_sharded_checkpoint

        trainer_state = {
            key: value for key, value in trainer.state_dict().items() if key not in ("optimizer", "critic_optimizer")
        }
        save_sharded_checkpoint(
            state.checkpoints_root or state.run.checkpoints,
            trainer.steps_done,
            model=trainer.model,
            optimizer=trainer.optimizer,
            trainer_state=trainer_state,
            info=info,
            keep=state.config.keep_checkpoints,
            dist=state.dist,
            critic=trainer.critic,
        )
        return
    if not state.dist.is_main:  # every rank holds the same trainer state (DDP); rank 0 writes it
        return
    save_checkpoint(
        state.run.checkpoints,
        trainer.steps_done,
        model=trainer.model,
        critic_module=trainer.critic.module if trainer.critic is not None else None,
        trainer_state=trainer.state_dict(),
        keep=state.config.keep_checkpoints,
        info=info,
    )


def resume_trainer(state) -> None:
    """Load the checkpoint into the trainer and drop log lines written after it."""
    from agentic_rl.training.checkpoint import CheckpointError, load_checkpoint
    from agentic_rl.training.sharded_checkpoint import is_sharded, load_sharded_weights

    trainer = state.trainer
    sharded = is_sharded(state.checkpoint)
    if sharded:
        load_sharded_weights(state.checkpoint, model=trainer.model, optimizer=trainer.optimizer, critic=trainer.critic)
    elif trainer.strategy.sharded:
        raise ConfigError(
            f"--resume: {state.checkpoint} was written by one process or DDP; resume it with trainer.strategy ddp or single"
        )
    critic_module = trainer.critic.module if trainer.critic is not None and not sharded else None
    try:
        trainer_state, info = load_checkpoint(
            state.checkpoint, model=None if sharded else trainer.model, critic_module=critic_module
        )
    except CheckpointError as error:
        raise ConfigError(f"--resume: {error}") from None
    trainer.backend.sync_weights(
        trainer.strategy.full_weights(trainer.model)
    )  # an engine with its own copy must see the loaded weights
    trainer.load_state_dict(trainer_state)  # after the sync: restores the engine's weight version too
    for name in LOGS:
        state.run.truncate_lines(name, info["tracking"][name])
    try:
        restore_memory(trainer.backend, info, ray_workers=state.config.distributed.engine == "ray")
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"--resume: {state.checkpoint}/state.json: memory: {error}") from None
    state.events.on_stage(
        f"resumed from {state.checkpoint.name} (step {trainer.steps_done} of {state.config.rl.steps})"
    )


def restore_memory(backend, info: dict, *, ray_workers: bool) -> None:
    """Put the checkpoint's shared memory stores back where the episodes run: this process,
    or each Ray rollout worker (``worker_memory``: one list of stores per worker)."""
    from agentic_rl.tools.memory_store import load_shared_stores

    load_shared_stores(info.get("memory") or [])
    saved = info.get("worker_memory")
    if ray_workers:
        if hasattr(backend, "load_memory"):  # rank 0 holds the workers; other ranks run no episodes
            # From a checkpoint of an in-process run every worker starts with the notes it had.
            backend.load_memory(saved if saved else [info.get("memory") or []] * len(backend.workers))
    elif saved:
        if len(saved) != 1:
            raise ValueError(
                f"it holds the memory stores of {len(saved)} Ray rollout workers; resume with distributed.engine: ray and rollout_workers: {len(saved)}"
            )
        load_shared_stores(saved[0])

"""The RL stage of a run: the trainer built over the run's policy, then its steps.

``run_rl`` builds the ``RLTrainer`` (with Ray rollout workers when
``distributed.engine: ray``), resumes it from the run's checkpoint or checkpoints the
stages before it, and runs the step loop: each step's metrics go to the sinks, a few
rollouts to rollouts.jsonl, and a checkpoint is written every ``checkpoint_every`` steps.
It reads and updates the run's shared ``RunState`` (training/stages.py).
"""

from __future__ import annotations

from agentic_rl.config import ConfigError
from agentic_rl.models.lora import adapter_for_role
from agentic_rl.tracking.jsonl import JsonlWriter
from agentic_rl.training.run_checkpoints import TrainingStopped, checkpoint_run, resume_trainer
from agentic_rl.training.stages import NoProgress, RunState


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
    if config.lora.roles:  # each role's samples train (and are scored by) its own adapter
        state.trainer.adapter_of = lambda t: adapter_for_role(config.lora.roles, t.info.get("role"))
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
                with events.progress_bar(shown, "rollouts", transient=True) if shown else NoProgress() as bar:
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

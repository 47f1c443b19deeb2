"""The choices the RL trainer makes when it is built, each from the config and the facts it reads.

``RLTrainer.__init__`` (training/rl.py) wires the policy, the engine, the optimizer and
the update together; the decisions it takes on the way are functions here, each stated
once with its reason: the task schedule (one env, or a weighted mix with an optional
curriculum), the trainer strategy (and whether the engine can run beside it), where the
update's pre-update log-probs come from, and whether the update may leave
zero-advantage trajectories out.
"""

from __future__ import annotations

from agentic_rl.algorithms import ROW_LOCAL_LOSSES, resolve_old_logprobs, resolve_rollout_correction
from agentic_rl.config import TrainConfig
from agentic_rl.distributed import DistContext
from agentic_rl.models.precision import compute_precision
from agentic_rl.training.curriculum import Curriculum
from agentic_rl.training.reference import ReferencePolicy
from agentic_rl.training.task_schedule import MixedTaskSchedule, TaskPools, TaskSchedule
from agentic_rl.training.value import Critic


def task_schedule_for(
    config: TrainConfig, task_indices: list[int], task_pools: TaskPools | None
) -> tuple[TaskSchedule | MixedTaskSchedule, Curriculum | None]:
    """(the schedule the steps draw tasks from, the curriculum reweighting it or None): one
    env's tasks in order, or a mix's (``task_pools``; one env's alone under a curriculum)
    drawn by env weight."""
    if task_pools is None and not config.curriculum.enabled:
        return TaskSchedule(task_indices, seed=config.seed), None
    pools = task_pools or TaskPools({config.env.name: list(task_indices)}, {config.env.name: 1.0})
    schedule = MixedTaskSchedule(pools.pools, pools.weights, seed=config.seed)
    return schedule, Curriculum(config.curriculum, schedule) if config.curriculum.enabled else None


def strategy_name(config: TrainConfig, dist: DistContext) -> str:
    """``trainer.strategy``, with ``auto`` as ddp over several ranks and single in one process."""
    return config.trainer.strategy if config.trainer.strategy != "auto" else ("ddp" if dist.distributed else "single")


def check_strategy_engine(strategy, backend) -> None:
    """Refuse FSDP2 beside an engine that decodes with the trainer's own weights."""
    if strategy.name == "fsdp2" and not getattr(backend, "separate_weights", False):
        raise ValueError(
            "trainer.strategy fsdp2: the engine must hold its own copy of the weights (sharded parameters cannot decode)"
        )


def logprob_sources(config: TrainConfig, model, backend) -> tuple[str, str, bool]:
    """(the importance correction between sampler and trainer log-probs: none, tis, mis,
    seq-tis, seq-mis; where the pre-update log-probs of a batch's later updates come from:
    sampler or recompute; whether the first update reads the current log-probs)."""
    algorithm = config.algorithm
    separate_sampler = bool(getattr(backend, "separate_weights", False))
    correction = resolve_rollout_correction(
        algorithm.correction.kind, precision=compute_precision(model), separate_sampler=separate_sampler
    )
    sampler_facts = dict(
        precision=compute_precision(model),
        policy_logprobs=bool(getattr(backend, "policy_logprobs", False)),
        correction=correction,
    )
    old_logprobs = resolve_old_logprobs(algorithm.old_logprobs, **sampler_facts)
    # The first update's policy is the pre-update one, so it reads the current log-probs
    # (detached: ratio exactly 1): recomputing skips those rows' forward pass, and where
    # the sampler's numbers are the trainer's the sampler-vs-trainer metrics stay
    # measured. Only an explicit sampler elsewhere (bypass mode) takes the sampler's in
    # every update.
    current_first = old_logprobs == "recompute" or resolve_old_logprobs("auto", **sampler_facts) == "sampler"
    return correction, old_logprobs, current_first


def skips_zero_advantage(config: TrainConfig, critic: Critic | None, reference: ReferencePolicy | None) -> bool:
    """Whether the update leaves all-zero-advantage trajectories out (exact only where no
    loss term reads them: a row-local policy loss, no KL loss, no critic)."""
    algorithm = config.algorithm
    return (
        config.rl.skip_zero_advantage
        and algorithm.policy_loss.name in ROW_LOCAL_LOSSES
        and critic is None
        and (reference is None or algorithm.kl.in_reward)
    )

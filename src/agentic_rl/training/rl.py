"""The RL step, split into functions a reader can follow:
sample groups -> score (rewards + shaping, advantages; training/scoring.py) -> update
(PPO epochs over mini-batches, one accumulated optimizer step each; training/rl_update.py,
its micro-batch loss in training/rl_loss.py). The forwards over trajectories both halves
run are training/rl_forward.py's; the choices made when the trainer is built,
training/rl_setup.py's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from agentic_rl.accel import device_peak_bytes, release_memory, reset_device_peak, resident_bytes
from agentic_rl.anatomy import split_model
from agentic_rl.config import TrainConfig, check_world_size
from agentic_rl.distributed import DistContext, make_strategy
from agentic_rl.envs.base import Env
from agentic_rl.models.lora import refresh_snapshot, snapshot_due
from agentic_rl.models.precision import compute_precision
from agentic_rl.seeds import derive_seed
from agentic_rl.tracking.diagnostics import step_diagnostics
from agentic_rl.training.logprobs import PolicyLogprobs
from agentic_rl.training.optim import NonFiniteError, NonFiniteGuard, make_optimizer, make_scheduler, restart_schedule
from agentic_rl.training.reference import ReferencePolicy, resolve_kl_reference
from agentic_rl.training.rl_forward import TrajectoryForwards, token_kl, token_values
from agentic_rl.training.rl_metrics import forward_only_metrics, per_env_metrics, rollout_metrics
from agentic_rl.training.rl_sampling import ROLLOUT_MODES
from agentic_rl.training.rl_setup import (
    check_strategy_engine,
    logprob_sources,
    skips_zero_advantage,
    strategy_name,
    task_schedule_for,
)
from agentic_rl.training.rl_update import PolicyUpdate
from agentic_rl.training.scoring import (
    ScoredBatch,
    first_tasks,
    keep_groups,
    score,
    shaped_rewards,
    usable_trajectories,
)
from agentic_rl.training.speed import apply_speed_options
from agentic_rl.training.task_schedule import TaskPools
from agentic_rl.training.value import Critic
from agentic_rl.types import Trajectory, TrajectoryGroup

RELEASE_MEMORY_ABOVE = 0.5
"""Fraction of physical memory held by the process past which a step hands free heap pages back."""

__all__ = ["ROLLOUT_MODES", "NonFiniteError", "RLTrainer"]


class RLTrainer:
    """Owns the policy, its optimizer and the task schedule; ``step()`` runs one RL step."""

    on_trajectory: Callable[[Trajectory], None] | None = None  # each finished rollout (a progress display)

    def __init__(
        self,
        config: TrainConfig,
        model,
        tokenizer,
        backend,
        make_env: Callable[[], Env] | None,
        task_indices: list[int],
        *,
        dist: DistContext | None = None,
        sampler: Callable | None = None,
        task_pools: TaskPools | None = None,
    ) -> None:
        self.config = config
        self.sampler = sampler
        """How a step samples its groups in place of ``rl.sampling``'s mode (same signature
        as ``ROLLOUT_MODES``' functions): e.g. agent programs through the gateway."""
        self.model = model
        self.tokenizer = tokenizer
        self.backend = backend
        self.make_env = make_env
        self.dist = dist or DistContext()
        """The ranks this trainer spans (one process by default)."""
        self.task_pools = task_pools
        """A mix's tasks by env label and the envs' weights (None: one env): the schedule draws
        envs by weight and the step's metrics get a per-env copy (``reward_mean@label``)."""
        self.task_schedule, self.curriculum = task_schedule_for(config, task_indices, task_pools)
        algorithm, critic = config.algorithm, config.algorithm.critic
        check_world_size(config, self.dist.world_size)
        apply_speed_options(model, gradient_checkpointing=config.gradient_checkpointing, compile=config.compile)
        # The reference and a separate critic copy the unsharded model, before the strategy wraps it.
        self.reference = ReferencePolicy.build(
            model,
            lora_enabled=config.lora.enabled,
            kl_needed=bool(algorithm.kl.coef),
            placement=resolve_kl_reference(algorithm.kl.reference, compute_precision(model)),
        )
        """The initial policy for the KL term (None without one)."""
        self.critic = None if critic.kind == "none" else Critic(model, critic.kind, lr=critic.lr)
        self.strategy = make_strategy(
            strategy_name(config, self.dist),
            self.dist,
            precision=compute_precision(model),
            cpu_offload=config.trainer.cpu_offload,
        )
        check_strategy_engine(self.strategy, backend)
        self.policy = self.strategy.wrap(PolicyLogprobs(model), layers=list(split_model(model)[0].layers))
        """The trainable forward (log-probs of a batch) as the strategy runs it."""
        self.forwards = TrajectoryForwards(config, model, tokenizer, self.policy, self.dist)
        """The policy's forwards over trajectories in length-bucketed micro-batches."""
        if self.reference is not None and self.strategy.sharded:
            self.reference = self._shard_reference(self.reference)
        if self.critic is not None:
            self.critic.shard(self.strategy)
        self.optimizer = make_optimizer(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        updates = config.rl.steps * config.rl.epochs * config.rl.mini_batches
        self.scheduler = make_scheduler(
            self.optimizer, warmup_steps=config.optim.warmup_steps, total_steps=updates, schedule=config.optim.schedule
        )
        self.rollout_correction, self.old_logprobs, current_first = logprob_sources(config, model, backend)
        """The importance correction between sampler and trainer log-probs in use (none, tis,
        mis, seq-tis, seq-mis); where the pre-update log-probs of a batch's later updates
        come from (sampler or recompute)."""
        self.step_index = 0
        self.stream = None
        """Async mode's stream of groups sampled ahead (distributed.max_staleness set; built at the first step)."""
        self.skip_zero_advantage = skips_zero_advantage(config, self.critic, self.reference)
        """Whether the update leaves all-zero-advantage trajectories out (see ``rl_setup``)."""
        self.nonfinite = NonFiniteGuard(config.rl.max_nonfinite_steps, hint="lower optim.lr or check the rewards")
        self.response_length_history: list[float] = []
        self.updater = self._policy_update(current_first)
        """The update half of a step (training/rl_update.py)."""

    def _policy_update(self, current_first: bool) -> PolicyUpdate:
        """The update over this trainer's forwards, optimizers, critic and reference;
        ``current_first``: the first update reads the current log-probs (``rl_setup``)."""
        return PolicyUpdate(
            self.config,
            self.forwards,
            strategy=self.strategy,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            critic=self.critic,
            reference=self.reference,
            nonfinite=self.nonfinite,
            rollout_correction=self.rollout_correction,
            old_logprobs=self.old_logprobs,
            current_first=current_first,
            skip_zero_advantage=self.skip_zero_advantage,
        )

    def _shard_reference(self, reference: ReferencePolicy) -> ReferencePolicy:
        """The reference run as the sharded policy runs: with LoRA through the policy's own
        sharded forward (adapters off), otherwise its frozen copy sharded the same way (a
        CPU-placed copy stays whole: it holds no accelerator memory). Its forwards are
        then collective: every rank runs as many (see ``TrajectoryForwards.per_token_rows``' lockstep)."""
        if reference.adapters_disabled:
            return dataclasses.replace(reference, forward=self.policy)
        if next(reference.model.parameters()).device != self.device:
            return reference
        return dataclasses.replace(
            reference,
            forward=self.strategy.wrap(
                PolicyLogprobs(reference.model), layers=list(split_model(reference.model)[0].layers)
            ),
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def adapter_of(self) -> Callable[[Trajectory], str] | None:
        """The LoRA adapter that plays a trajectory's role (``lora.roles``): micro-batches never
        mix adapters, and each forward runs its own (None: one policy)."""
        return self.forwards.adapter_of

    @adapter_of.setter
    def adapter_of(self, adapter_of: Callable[[Trajectory], str] | None) -> None:
        self.forwards.adapter_of = adapter_of

    @property
    def steps_done(self) -> int:
        """RL steps done so far."""
        return self.step_index

    def state_dict(self) -> dict:
        """Everything besides the weights that a resumed run needs to continue exactly."""
        state = {
            "step": self.step_index,
            "task_schedule": self.task_schedule.state_dict(),
            "response_length_history": list(self.response_length_history),
            "nonfinite_in_a_row": self.nonfinite.in_a_row,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "weight_version": self.backend.weight_version,
        }
        if self.critic is not None:
            state["critic_optimizer"] = self.critic.optimizer.state_dict()
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.step_index = int(state["step"])
        self.task_schedule.load_state_dict(state["task_schedule"])
        if self.curriculum is not None and "curriculum" in state:
            self.curriculum.load_state_dict(state["curriculum"])  # sets the schedule's weights as they were
        self.response_length_history = list(state.get("response_length_history", []))
        self.nonfinite.in_a_row = int(state.get("nonfinite_in_a_row", 0))
        if "optimizer" in state:  # a sharded checkpoint restores it with the weights
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        restart_schedule(self.scheduler, self.config.optim.lr)  # a resume may change optim.lr, the schedule or steps
        if "weight_version" in state:  # trajectories keep the version numbering of an uninterrupted run
            self.backend.weight_version = int(state["weight_version"])
        if self.critic is not None and "critic_optimizer" in state:  # a sharded checkpoint restores it with the weights
            self.critic.optimizer.load_state_dict(state["critic_optimizer"])

    def step(self) -> tuple[dict[str, float], list[TrajectoryGroup]]:
        config = self.config
        started = time.monotonic()
        reset_device_peak(self.device)
        groups, kept, sampling_metrics = self._sample()
        rollout_time = time.monotonic() - started
        scored, rewards, reward_kl = self.score_groups(kept, groups)
        metrics = rollout_metrics(groups, rewards, excluded=scored.excluded)
        metrics.update({f"role_weight@{role}": weight for role, weight in scored.role_weights.items()})
        metrics.update(sampling_metrics)
        if self.task_pools is not None:
            metrics.update(per_env_metrics(groups, rewards, self._label_of, list(self.task_pools.pools)))
        if self.curriculum is not None:
            self.curriculum.observe(groups)
            if self.curriculum.due(self.step_index + 1):
                metrics.update(self.curriculum.update())  # the next step draws with the new weights
        if reward_kl is not None:
            metrics["reward_kl"] = reward_kl
        metrics.update(
            step_diagnostics(
                [t for g in groups for t in g.trajectories], response_length_history=self.response_length_history
            )
        )
        self.response_length_history.append(metrics["response_length"])
        update_started = time.monotonic()
        total = sum(len(g.trajectories) for g in kept)
        failed_fraction = scored.excluded / max(total, 1)
        metrics["skipped_infra"] = float(failed_fraction > config.rl.max_failed_fraction)
        if scored.trajectories and not metrics["skipped_infra"]:
            metrics.update(self.update(scored))
            if snapshot_due(config.lora, self.step_index + 1):
                refresh_snapshot(self.model)  # lora.roles snapshot roles play the policy as of now
            sync_started = time.monotonic()  # the next rollouts sample from the new weights
            self.backend.sync_weights(self.strategy.full_weights(self.model))
            metrics["weight_sync_time_s"] = time.monotonic() - sync_started
        if "entropy" not in metrics:  # no token forwarded (all groups alike): the diagnostics without a backward
            usable, sharded = usable_trajectories(groups), self.strategy.sharded
            forwards = self.forwards
            metrics.update(forward_only_metrics(forwards.per_token_rows, forwards.logprobs, usable, lockstep=sharded))
        # The heap keeps the update's freed activations for the next step (accel/allocator.py);
        # past half the machine's memory, fragmentation is handed back before it can grow further.
        metrics["host_memory_released_gb"] = release_memory(above=RELEASE_MEMORY_ABOVE) / 2**30
        resident = resident_bytes()
        if resident is not None:
            metrics["host_rss_gb"] = resident / 2**30
        peak = device_peak_bytes(self.device)
        if peak is not None:  # the step's most live GPU memory, to set against `agentic-rl plan`
            metrics["device_peak_gb"] = peak / 2**30
        metrics.update(
            step=self.step_index,
            step_time_s=time.monotonic() - started,
            rollout_time_s=rollout_time,
            update_time_s=time.monotonic() - update_started,
        )
        sampled = sum(t.response_tokens for g in groups for t in g.trajectories)
        metrics["tokens_per_s"] = sampled / max(rollout_time, 1e-9)
        self.step_index += 1
        return metrics, groups

    def _label_of(self, group: TrajectoryGroup) -> str | None:
        return self.task_schedule.pool_of(group.task_index) if group.task_index is not None else None

    def _stream(self):
        """Async mode's group stream (started at the first step, after a resume restored the
        task schedule and the weight version)."""
        if self.stream is None:
            config = self.config
            self.stream = self.backend.stream(
                lambda: self.task_schedule.next(1)[0],
                group_size=config.rl.group_size,
                batch=config.rl.tasks_per_step,
                max_staleness=config.distributed.max_staleness,
                seed=config.seed,
            )
        return self.stream

    def close(self) -> None:
        """Stop sampling ahead (async mode)."""
        if self.stream is not None:
            self.stream.cancel()

    def score_groups(
        self, kept: list[TrajectoryGroup], groups: list[TrajectoryGroup] | None = None
    ) -> tuple[ScoredBatch, list[float], float | None]:
        """Advantages of the ``kept`` groups (with the critic's values and the KL-in-reward
        term when the algorithm uses them) -> (scored batch, the shaped rewards of every
        sampled group's usable trajectories (``groups``: all sampled, default ``kept``),
        the mean reward KL per response token or None)."""
        config, algorithm = self.config, self.config.algorithm
        groups = kept if groups is None else groups
        usable = usable_trajectories(kept)
        values = (
            token_values(self.forwards, self.critic, usable, sharded=self.strategy.sharded)
            if self.critic is not None and usable
            else None
        )
        kl = (
            token_kl(self.forwards, self.reference, usable, algorithm.kl.estimator)
            if algorithm.kl.in_reward and self.reference is not None and usable
            else None
        )
        # The metrics describe every sampled group; the update sees the kept ones, which
        # are the same groups unless the group filter dropped some.
        rewards = shaped_rewards(
            usable_trajectories(groups),
            max_total_tokens=config.rollout.max_total_tokens,
            reward=config.reward,
            step=self.step_index,
        )
        scored = score(
            kept,
            algorithm,
            max_total_tokens=config.rollout.max_total_tokens,
            attribution=config.rl.arpo.attribution,
            rewards=rewards if len(kept) == len(groups) else None,
            token_values=values,
            token_kl=kl,
            reward=config.reward,
            step=self.step_index,
        )
        reward_kl = None if kl is None else sum(map(sum, kl)) / max(sum(t.response_tokens for t in usable), 1)
        return scored, rewards, reward_kl

    def _sample(self) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup], dict[str, float]]:
        """(every sampled group, the groups kept for the update, metrics).

        Each generation round samples the tasks still missing and filters their groups with
        ``algorithm.group_filter``; rounds go on until ``rl.tasks_per_step`` tasks have a kept group (a task's
        per-role groups count once: ``scoring.first_tasks``) or ``rl.max_generation_rounds`` is reached (DAPO).
        """
        config, algorithm = self.config, self.config.algorithm
        sampled: list[TrajectoryGroup] = []
        kept: list[TrajectoryGroup] = []
        metrics: dict[str, float] = {}
        rounds = tasks = 0  # tasks: those with a kept group
        while rounds < config.rl.max_generation_rounds and tasks < config.rl.tasks_per_step:
            if config.distributed.max_staleness is not None:  # async: rank 0 takes, every rank gets the groups
                taken = (
                    self._stream().take(config.rl.tasks_per_step - tasks, self.backend.weight_version)
                    if self.dist.is_main
                    else None
                )
                groups, round_metrics = self.dist.broadcast_object(taken)
            else:
                task_indices = self.task_schedule.next(config.rl.tasks_per_step - tasks)
                # Round 0 keeps the seed a run without resampling uses; later rounds get fresh ones.
                seed = derive_seed(config.seed, "rl-step", self.step_index, round=rounds)
                groups, round_metrics = (self.sampler or ROLLOUT_MODES[config.rl.sampling])(self, task_indices, seed)
            for key, value in round_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + value
            sampled += groups
            kept, tasks = first_tasks(kept + keep_groups(groups, algorithm), config.rl.tasks_per_step)
            rounds += 1
        metrics = {key: value / rounds for key, value in metrics.items()}  # the rollout mode's, averaged over rounds
        if algorithm.group_filter.name != "none":
            metrics.update(
                generation_rounds=float(rounds),
                groups_sampled=float(len(sampled)),
                groups_kept=float(len(kept)),
            )
        return sampled, kept, metrics

    def update(self, scored: ScoredBatch) -> dict[str, float]:
        """PPO epochs over mini-batches, each one optimizer step over length-bucketed
        micro-batches whose losses add up exactly to the mini-batch loss (global normalisers;
        ``PolicyUpdate.run``)."""
        return self.updater.run(scored, self.step_index)

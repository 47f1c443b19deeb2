"""The RL step, split into functions a reader can follow:
sample groups -> score (rewards + shaping, advantages; training/scoring.py) -> update
(PPO epochs over mini-batches, one accumulated optimizer step each; training/optim.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext

import torch

from agentic_rl.accel import device_peak_bytes, release_memory, reset_device_peak, resident_bytes
from agentic_rl.algorithms import (
    ROW_LOCAL_LOSSES,
    aggregate,
    compute_policy_loss,
    kl_penalty,
    resolve_old_logprobs,
    resolve_rollout_correction,
    rollout_correction,
    value_loss,
)
from agentic_rl.anatomy import split_model
from agentic_rl.config import TrainConfig, check_world_size
from agentic_rl.distributed import DistContext, make_strategy
from agentic_rl.envs.base import Env
from agentic_rl.models.lora import select_adapter
from agentic_rl.models.precision import compute_precision
from agentic_rl.seeds import derive_seed
from agentic_rl.tracking.diagnostics import step_diagnostics
from agentic_rl.training.batch import TokenBatch, collate, keyed_length_buckets, padding_batch
from agentic_rl.training.curriculum import Curriculum
from agentic_rl.training.logprobs import PolicyLogprobs
from agentic_rl.training.optim import (
    NonFiniteError,
    NonFiniteGuard,
    Optimized,
    accumulate_and_step,
    make_optimizer,
    make_scheduler,
    optimizer_params,
    restart_schedule,
)
from agentic_rl.training.reference import ReferencePolicy, resolve_kl_reference
from agentic_rl.training.rl_metrics import UpdateTally, forward_only_metrics, per_env_metrics, rollout_metrics
from agentic_rl.training.rl_sampling import ROLLOUT_MODES
from agentic_rl.training.scoring import (
    ScoredBatch,
    first_tasks,
    keep_groups,
    score,
    shaped_rewards,
    usable_trajectories,
)
from agentic_rl.training.speed import apply_speed_options
from agentic_rl.training.task_schedule import MixedTaskSchedule, TaskPools, TaskSchedule
from agentic_rl.training.value import Critic
from agentic_rl.types import Trajectory, TrajectoryGroup

RELEASE_MEMORY_ABOVE = 0.5
"""Fraction of physical memory held by the process past which a step hands free heap pages back."""

__all__ = ["ROLLOUT_MODES", "NonFiniteError", "RLTrainer"]


class RLTrainer:
    """Owns the policy, its optimizer and the task schedule; ``step()`` runs one RL step."""

    on_trajectory: Callable[[Trajectory], None] | None = None  # each finished rollout (a progress display)
    adapter_of: Callable[[Trajectory], str] | None = None
    """The LoRA adapter that plays a trajectory's role (``lora.roles``): micro-batches never
    mix adapters, and each forward runs its own (None: one policy)."""

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
        self.task_schedule: TaskSchedule | MixedTaskSchedule
        self.curriculum: Curriculum | None = None
        if task_pools is None and not config.curriculum.enabled:
            self.task_schedule = TaskSchedule(task_indices, seed=config.seed)
        else:
            pools = task_pools or TaskPools({config.env.name: list(task_indices)}, {config.env.name: 1.0})
            self.task_schedule = MixedTaskSchedule(pools.pools, pools.weights, seed=config.seed)
            if config.curriculum.enabled:
                self.curriculum = Curriculum(config.curriculum, self.task_schedule)
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
        strategy = (
            config.trainer.strategy
            if config.trainer.strategy != "auto"
            else ("ddp" if self.dist.distributed else "single")
        )
        self.strategy = make_strategy(
            strategy, self.dist, precision=compute_precision(model), cpu_offload=config.trainer.cpu_offload
        )
        if self.strategy.name == "fsdp2" and not getattr(backend, "separate_weights", False):
            raise ValueError(
                "trainer.strategy fsdp2: the engine must hold its own copy of the weights (sharded parameters cannot decode)"
            )
        self.policy = self.strategy.wrap(PolicyLogprobs(model), layers=list(split_model(model)[0].layers))
        """The trainable forward (log-probs of a batch) as the strategy runs it."""
        if self.reference is not None and self.strategy.sharded:
            self.reference = self._shard_reference(self.reference)
        if self.critic is not None:
            self.critic.shard(self.strategy)
        self.optimizer = make_optimizer(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        updates = config.rl.steps * config.rl.epochs * config.rl.mini_batches
        self.scheduler = make_scheduler(
            self.optimizer, warmup_steps=config.optim.warmup_steps, total_steps=updates, schedule=config.optim.schedule
        )
        separate_sampler = bool(getattr(backend, "separate_weights", False))
        self.rollout_correction = resolve_rollout_correction(
            algorithm.correction.kind, precision=compute_precision(model), separate_sampler=separate_sampler
        )
        """The importance correction between sampler and trainer log-probs in use (none, tis, mis, seq-tis, seq-mis)."""
        sampler_facts = dict(
            precision=compute_precision(model),
            policy_logprobs=bool(getattr(backend, "policy_logprobs", False)),
            correction=self.rollout_correction,
        )
        self.old_logprobs = resolve_old_logprobs(algorithm.old_logprobs, **sampler_facts)
        """Where the pre-update log-probs of a batch's later updates come from: sampler or recompute."""
        # The first update's policy is the pre-update one, so it reads the current log-probs
        # (detached: ratio exactly 1): recomputing skips those rows' forward pass, and where
        # the sampler's numbers are the trainer's the sampler-vs-trainer metrics stay
        # measured. Only an explicit sampler elsewhere (bypass mode) takes the sampler's in
        # every update.
        self._current_first = (
            self.old_logprobs == "recompute" or resolve_old_logprobs("auto", **sampler_facts) == "sampler"
        )
        self.step_index = 0
        self.stream = None
        """Async mode's stream of groups sampled ahead (distributed.max_staleness set; built at the first step)."""
        self.skip_zero_advantage = (
            config.rl.skip_zero_advantage
            and algorithm.policy_loss.name in ROW_LOCAL_LOSSES
            and self.critic is None
            and (self.reference is None or algorithm.kl.in_reward)
        )
        """Whether the update leaves all-zero-advantage trajectories out (exact only where no
        loss term reads them: a row-local policy loss, no KL loss, no critic)."""
        self.nonfinite = NonFiniteGuard(config.rl.max_nonfinite_steps, hint="lower optim.lr or check the rewards")
        self.response_length_history: list[float] = []

    def _shard_reference(self, reference: ReferencePolicy) -> ReferencePolicy:
        """The reference run as the sharded policy runs: with LoRA through the policy's own
        sharded forward (adapters off), otherwise its frozen copy sharded the same way (a
        CPU-placed copy stays whole: it holds no accelerator memory). Its forwards are
        then collective: every rank runs as many (see ``_per_token_rows``' lockstep)."""
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
            sync_started = time.monotonic()  # the next rollouts sample from the new weights
            self.backend.sync_weights(self.strategy.full_weights(self.model))
            metrics["weight_sync_time_s"] = time.monotonic() - sync_started
        if "entropy" not in metrics:  # no token forwarded (all groups alike): the diagnostics without a backward
            usable, sharded = usable_trajectories(groups), self.strategy.sharded
            metrics.update(forward_only_metrics(self._per_token_rows, self._logprobs, usable, lockstep=sharded))
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
        token_values = self._token_values(usable) if self.critic is not None and usable else None
        token_kl = self._token_kl(usable) if algorithm.kl.in_reward and self.reference is not None and usable else None
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
            token_values=token_values,
            token_kl=token_kl,
            reward=config.reward,
            step=self.step_index,
        )
        reward_kl = (
            None if token_kl is None else sum(map(sum, token_kl)) / max(sum(t.response_tokens for t in usable), 1)
        )
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

    def _per_token_rows(
        self,
        trajectories: list[Trajectory],
        compute: Callable[[TokenBatch], torch.Tensor],
        extra: str | None = None,
        *,
        lockstep: bool = False,
    ) -> list[list[float]]:
        """``compute(batch) -> [b, T]`` over length-bucketed micro-batches, without gradients,
        as one row per trajectory aligned with its token_ids. ``extra`` names a per-token
        trajectory field (e.g. "sampler_logprobs") put into ``batch.per_token``.
        ``lockstep``: ``compute`` runs the strategy's wrapped policy, whose forwards are
        collective: every rank runs as many micro-batches (padding ones are discarded)."""
        lengths = [len(t.token_ids) for t in trajectories]
        buckets: list[tuple[str | None, list[int]] | None] = list(self._buckets(trajectories, lengths))
        if lockstep:
            buckets += [None] * self.dist.lockstep_padding(len(buckets))
        rows: dict[int, list[float]] = {}
        with torch.no_grad():
            for keyed in buckets:
                if keyed is None:
                    compute(self._padding_batch((extra,) if extra else ()))
                    continue
                bucket = self._use_adapter(*keyed)
                members = [trajectories[i] for i in bucket]
                values = {extra: [getattr(t, extra) for t in members]} if extra else None
                batch = collate(
                    [t.token_ids for t in members],
                    [t.loss_mask for t in members],
                    pad_token_id=self.tokenizer.pad_token_id,
                    per_token=values,
                ).to(self.device)
                out = compute(batch)
                for row, i in enumerate(bucket):
                    rows[i] = out[row, : lengths[i]].tolist()
        return [rows[i] for i in range(len(trajectories))]

    def _buckets(self, trajectories: list[Trajectory], lengths: list[int]) -> list[tuple[str | None, list[int]]]:
        """Length-bucketed micro-batches of ``trajectories``, each of one adapter (``adapter_of``)."""
        keys = [self.adapter_of(t) if self.adapter_of else None for t in trajectories]
        return keyed_length_buckets(keys, lengths, self.config.rl.micro_batch_tokens, len(trajectories))

    def _use_adapter(self, adapter: str | None, bucket: list[int]) -> list[int]:
        if adapter is not None:
            select_adapter(self.model, adapter)
        return bucket

    def _padding_batch(self, rows: tuple[str, ...] = ()) -> TokenBatch:
        return padding_batch(self.tokenizer.pad_token_id, rows).to(self.device)

    def _token_values(self, trajectories: list[Trajectory]) -> list[list[float]]:
        """Critic values V(s_t) at sampled tokens before the update (GAE's values and the
        value-clipping anchor)."""
        self.critic.train(False)
        if self.critic.mode == "shared" and self.strategy.sharded:
            # A sharded backbone runs only inside the policy's wrapper: values from its forward.
            def compute(batch: TokenBatch) -> torch.Tensor:
                with self.critic.values_from_policy_forward(batch.loss_mask) as captured:
                    self._logprobs(batch)
                return captured["values"]
        else:

            def compute(batch: TokenBatch) -> torch.Tensor:
                return self.critic.values(batch.input_ids, batch.attention_mask, batch.loss_mask)

        return self._per_token_rows(trajectories, compute, lockstep=self.strategy.sharded)

    def _token_kl(self, trajectories: list[Trajectory]) -> list[list[float]]:
        """Per-token KL(pi_old || ref) estimates at sampled tokens, with the sampler's
        log-probs as pi_old (the tokens were drawn from it: no extra policy forward)."""
        estimator = self.config.algorithm.kl.estimator

        def compute(batch: TokenBatch) -> torch.Tensor:
            reference = self.reference.logprobs(batch, self._temperature)
            return kl_penalty(batch.per_token["sampler_logprobs"], reference, estimator) * batch.loss_mask

        return self._per_token_rows(
            trajectories, compute, extra="sampler_logprobs", lockstep=self.reference.forward is not None
        )

    @property
    def _temperature(self) -> float:
        """The sampler's temperature, which the log-probs divide the logits by (1 for greedy)."""
        temperature = self.config.rollout.temperature
        return max(temperature, 1e-6) if temperature > 0 else 1.0

    def _logprobs(self, batch: TokenBatch, *, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The policy's log-probs [b, T] (and entropies) of ``batch``'s loss tokens."""
        return self.policy(
            batch.input_ids,
            batch.attention_mask,
            batch.loss_mask,
            temperature=self._temperature,
            with_entropy=with_entropy,
        )

    def _train_mode(self, mode: bool) -> None:
        self.model.train(mode)
        if self.critic is not None:
            self.critic.train(mode)

    def update(self, scored: ScoredBatch) -> dict[str, float]:
        """PPO epochs over mini-batches, each one optimizer step over length-bucketed
        micro-batches whose losses add up exactly to the mini-batch loss (global normalisers)."""
        config, dist = self.config, self.dist
        order = torch.randperm(
            len(scored.trajectories), generator=torch.Generator().manual_seed(config.seed + self.step_index)
        ).tolist()
        minis = [order[i :: config.rl.mini_batches] for i in range(config.rl.mini_batches)]
        trained = self._trained(scored)
        # Each rank trains on every world-size-th trajectory of each mini-batch that the loss
        # reads; the normalisers stay the whole mini-batch's, so the ranks' losses add up to its loss.
        shares = [[i for i in mini if trained[i]][dist.rank :: dist.world_size] for mini in minis]
        updates = config.rl.epochs * config.rl.mini_batches
        # The parameters each optimizer holds: under FSDP2 a root module left unsharded by a
        # gradient-free forward (pre-update values or KL) exposes its full tensors as its
        # parameters until the next backward; clipping must see the sharded ones that get the gradients.
        groups = [Optimized(optimizer_params(self.optimizer), self.optimizer, self.scheduler)]
        if self.critic is not None:
            groups.append(
                Optimized(optimizer_params(self.critic.optimizer), self.critic.optimizer)
            )  # its own optimizer, clipped on its own
        tally = UpdateTally()
        self._train_mode(True)
        try:
            # The policy changes between updates, so the ratio needs the pre-update
            # log-probs; in the first update they are the current ones (ratio exactly 1).
            old_logprobs = None
            if updates > 1:
                # Rows read only by the first update need no pre-update pass (see _current_first).
                later = shares[1:] if self._current_first and config.rl.epochs == 1 else shares
                members = sorted({i for share in later for i in share})
                old_logprobs = (
                    self._old_logprobs(scored, members)
                    if self.old_logprobs == "recompute"
                    else self._sampler_logprobs(scored, members)
                )
            for epoch in range(config.rl.epochs):
                for index, (mini, share) in enumerate(zip(minis, shares)):
                    first = epoch == 0 and index == 0 and self._current_first
                    micro_losses = self._micro_losses(scored, mini, share, None if first else old_logprobs, tally)
                    tally.add_step(
                        accumulate_and_step(
                            micro_losses,
                            groups,
                            max_grad_norm=config.optim.max_grad_norm,
                            guard=self.nonfinite,
                            grad_scale=self.strategy.grad_scale,
                            reduce=dist.all_reduce,
                        )
                    )
        finally:
            self._train_mode(False)
        tally.merge_ranks(dist)
        metrics = tally.metrics(
            updates=updates,
            critic=self.critic is not None,
            lr=self.scheduler.get_last_lr()[0],
            trajectories=scored.trajectories,
        )
        metrics["zero_advantage_skipped"] = 1.0 - sum(trained) / max(len(trained), 1)
        return metrics

    def _trained(self, scored: ScoredBatch) -> list[bool]:
        """Per trajectory, whether the update forwards it: all of them, or (``skip_zero_advantage``
        where exact) those with a non-zero advantage on a sampled token; the others would
        add exactly zero to the loss and its gradient."""
        if not self.skip_zero_advantage:
            return [True] * len(scored.trajectories)
        return [
            any(a != 0.0 for a, m in zip(row, t.loss_mask) if m)
            for t, row in zip(scored.trajectories, scored.advantages)
        ]

    def _old_logprobs(self, scored: ScoredBatch, members: list[int]) -> list[list[float] | None]:
        """The pre-update log-probs of the trajectories ``members`` (this rank's), by index."""
        rows = self._per_token_rows(
            [scored.trajectories[i] for i in members], lambda batch: self._logprobs(batch)[0], lockstep=True
        )
        out: list[list[float] | None] = [None] * len(scored.trajectories)
        for i, row in zip(members, rows):
            out[i] = row
        return out

    @staticmethod
    def _sampler_logprobs(scored: ScoredBatch, members: list[int]) -> list[list[float] | None]:
        """The sampler's recorded log-probs of the trajectories ``members`` as the pre-update
        ones (``old_logprobs: sampler``): the same numbers a forward pass would give, without it."""
        wanted = set(members)
        return [list(t.sampler_logprobs) if i in wanted else None for i, t in enumerate(scored.trajectories)]

    def _collate(self, scored: ScoredBatch, members: list[int], old_logprobs: list[list[float]] | None) -> TokenBatch:
        """One micro-batch of ``scored``'s trajectories ``members`` with every per-token row
        the loss reads: advantages, and the pre-update log-probs and critic targets when used."""
        rows = {"advantages": scored.advantages, "sampler_logprobs": [t.sampler_logprobs for t in scored.trajectories]}
        if old_logprobs is not None:
            rows["old_logprobs"] = old_logprobs
        if self.critic is not None:
            rows.update(returns=scored.returns, old_values=scored.old_values)
        trajectories = [scored.trajectories[i] for i in members]
        return collate(
            [t.token_ids for t in trajectories],
            [t.loss_mask for t in trajectories],
            pad_token_id=self.tokenizer.pad_token_id,
            per_token={name: [values[i] for i in members] for name, values in rows.items()},
        )

    def _micro_losses(
        self,
        scored: ScoredBatch,
        mini: list[int],
        share: list[int],
        old_logprobs: list[list[float]] | None,
        tally: UpdateTally,
    ) -> Iterator[torch.Tensor]:
        """The loss of each length-bucketed micro-batch of ``share`` (this rank's part of the
        mini-batch ``mini``; all of it in one process), normalised by the whole mini-batch
        so that the losses of every rank add up to its loss; each micro-batch's metrics go
        into ``tally``. Every rank yields as many losses (padding ones are zero), and all
        but the last only accumulate gradients: the strategy syncs once per step."""
        trajectories = scored.trajectories
        lengths = [len(trajectories[i].token_ids) for i in share]
        normalisers = {
            "num_tokens": float(sum(sum(trajectories[i].loss_mask) for i in mini)),
            "num_sequences": float(len(mini)),
            "norm_length": float(self.config.rollout.max_total_tokens),
        }
        # Nothing to train on (every trajectory skipped): one padding micro-batch still gives
        # zero gradients, so the optimizer steps exactly as it would on the full batch.
        buckets: list[tuple[str | None, list[int]] | None] = (
            list(self._buckets([trajectories[i] for i in share], lengths)) if share else [None]
        )
        buckets += [None] * self.dist.lockstep_padding(len(buckets))
        for index, keyed in enumerate(buckets):
            last = index == len(buckets) - 1
            with nullcontext() if last else self.strategy.accumulating(self.policy):
                if keyed is None:
                    rows = (
                        "advantages",
                        "sampler_logprobs",
                        *(("old_logprobs",) if old_logprobs is not None else ()),
                        *(("returns", "old_values") if self.critic is not None else ()),
                    )
                    loss, *_ = self._micro_batch_loss(self._padding_batch(rows), normalisers)
                    yield loss * 0.0
                    continue
                bucket = self._use_adapter(*keyed)
                members = [share[j] for j in bucket]
                batch = self._collate(scored, members, old_logprobs).to(self.device)
                loss, entropy, sums, maxima = self._micro_batch_loss(batch, normalisers)
                tally.add_micro_batch(
                    sums, float(batch.loss_mask.sum()), members, entropy, [lengths[j] for j in bucket], maxima
                )
                yield loss
        if self.critic is not None and not self.critic.sharded:
            # All backwards are done: a replicated critic (a DDP copy, a shared head) lives
            # outside the policy's wrapper; its gradients are averaged here.
            self.strategy.average_gradients(self.critic.parameters())

    def _micro_batch_loss(
        self, batch: TokenBatch, normalisers: dict[str, float]
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float], dict[str, float]]:
        """Policy loss + the KL-to-reference term (when KL is a loss) + the value loss (with a
        critic) on one micro-batch -> (loss, entropy [b, T], the sums it adds to the
        update's metrics: token-weighted, divided by the update's loss tokens at the end,
        the values whose maximum over the update is a metric)."""
        algorithm, critic = self.config.algorithm, self.critic
        shared_critic = critic is not None and critic.mode == "shared"
        with critic.values_from_policy_forward(batch.loss_mask) if shared_critic else nullcontext({}) as captured:
            logprobs, entropy = self._logprobs(batch, with_entropy=True)
        old = batch.per_token["old_logprobs"] if "old_logprobs" in batch.per_token else logprobs.detach()
        # The sampler drew the tokens; the loss's ratio is against the trainer's pre-update
        # policy: its importance weight scales each token's loss (through the advantage,
        # which every registered loss is linear in for a non-negative weight).
        correction = rollout_correction(
            old,
            batch.per_token["sampler_logprobs"],
            batch.loss_mask,
            mode=self.rollout_correction,
            cap=algorithm.correction.cap,
            low=algorithm.correction.low,
            high=algorithm.correction.high,
        )
        advantages = batch.per_token["advantages"] * correction.weights
        out = compute_policy_loss(
            algorithm.policy_loss.name,
            logprobs,
            old,
            advantages,
            batch.loss_mask,
            **algorithm.policy_loss.params,
            aggregation=algorithm.aggregation,
            **normalisers,
        )
        loss, loss_tokens, sums = out.loss, float(batch.loss_mask.sum()), {}
        if self.reference is not None and not algorithm.kl.in_reward:
            kl = kl_penalty(logprobs, self.reference.logprobs(batch, self._temperature), algorithm.kl.estimator)
            loss = loss + algorithm.kl.coef * aggregate(kl, batch.loss_mask, algorithm.aggregation, **normalisers)
            sums["kl"] = float((kl.detach() * batch.loss_mask).sum())
        if critic is not None:
            values = (
                captured["values"]
                if shared_critic
                else critic.values(batch.input_ids, batch.attention_mask, batch.loss_mask)
            )
            critic_loss, critic_metrics = value_loss(
                values,
                batch.per_token["old_values"],
                batch.per_token["returns"],
                batch.loss_mask,
                clip_range=algorithm.critic.value_clip or None,
                aggregation=algorithm.aggregation,
                **normalisers,
            )
            loss = loss + algorithm.critic.value_loss_coef * critic_loss
            sums["value_loss"] = float(
                critic_loss.detach()
            )  # already this micro-batch's share of the mini-batch loss (global normalisers)
            sums.update({key: value * loss_tokens for key, value in critic_metrics.items()})
        sums["entropy"] = float((entropy * batch.loss_mask).sum())
        sums.update(
            {
                key: out.metrics[key] * loss_tokens
                for key in ("clip_frac_low", "clip_frac_high", "ratio_mean", "approx_kl")
            }
        )
        maxima = {"rollout_logprob_diff_max": correction.metrics.pop("rollout_logprob_diff_max")}
        sums.update({key: value * loss_tokens for key, value in correction.metrics.items()})
        return loss, entropy, sums, maxima

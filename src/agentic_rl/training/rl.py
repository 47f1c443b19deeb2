"""The RL step, split into functions a reader can follow:
sample groups -> score (rewards + shaping) -> advantages -> batch -> update.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from agentic_rl.algorithms import aggregate, compute_advantages, compute_policy_loss, filter_groups, gae, kl_penalty, overlong_penalty, value_loss, zero_std_group_fraction
from agentic_rl.algorithms.arpo import hard_attribution
from agentic_rl.config import TrainConfig
from agentic_rl.envs.base import Env
from agentic_rl.evaluation.metrics import aggregate_metrics
from agentic_rl.rollout.arpo import arpo_rollout, branch_common_prefix
from agentic_rl.rollout.engine import rollout
from agentic_rl.training.batch import TokenBatch, collate, length_buckets
from agentic_rl.training.credit import build_advantage_inputs
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.speed import apply_speed_options
from agentic_rl.training.optim import make_optimizer, make_scheduler
from agentic_rl.tracking.diagnostics import mean_first_tokens_after_tool_entropy, step_diagnostics
from agentic_rl.training.task_schedule import TaskSchedule
from agentic_rl.training.value import Critic
from agentic_rl.seeds import derive_seed
from agentic_rl.types import Trajectory, TrajectoryGroup


@dataclass
class ScoredBatch:
    """The trajectories that enter the loss, with one reward and one advantage row each."""

    trajectories: list[Trajectory]
    rewards: torch.Tensor  # [N] outcome reward + shaping
    advantages: list[list[float]] = field(default_factory=list)  # per token, aligned with token_ids
    excluded: int = 0  # infrastructure failures kept out of the loss
    frac_zero_std_groups: float = 0.0
    returns: list[list[float]] | None = None  # critic targets per token (with a critic)
    old_values: list[list[float]] | None = None  # critic values at sampling time (with a critic)


def usable_trajectories(groups: list[TrajectoryGroup]) -> list[Trajectory]:
    """Trajectories whose env and tools did not crash (``infra_error`` ones leave the batch:
    the policy did not cause them, so they must not be scored)."""
    return [t for g in groups for t in g.trajectories if t.infra_error is None]


def shaped_rewards(trajectories: list[Trajectory], config: TrainConfig) -> torch.Tensor:
    """Outcome rewards [N] plus DAPO's soft overlong punishment when configured."""
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)
    algorithm = config.algorithm
    if algorithm.overlong_buffer and trajectories:
        # Length after the prompt against the room the token limit leaves: penalises
        # episodes that run into truncation (DAPO's soft overlong punishment).
        lengths = torch.tensor([len(t.token_ids) - t.prompt_length for t in trajectories])
        room = config.rollout.max_total_tokens - min(t.prompt_length for t in trajectories)
        rewards = rewards + overlong_penalty(lengths, room, min(algorithm.overlong_buffer, room))
    return rewards


def score(
    groups: list[TrajectoryGroup],
    config: TrainConfig,
    *,
    token_values: list[list[float]] | None = None,
    token_kl: list[list[float]] | None = None,
) -> ScoredBatch:
    """Rewards (with soft overlong punishment) and advantages for the usable trajectories.

    ``token_values`` (critic values) and ``token_kl`` (per-token KL to the reference, put
    into the reward when ``algorithm.kl_in_reward``) are rows aligned with
    :func:`usable_trajectories`. With values, the critic's targets (GAE returns) and the
    old values come back too.
    """
    usable = usable_trajectories(groups)
    excluded = sum(len(g.trajectories) for g in groups) - len(usable)
    if not usable:
        return ScoredBatch([], torch.zeros(0), excluded=excluded)
    rewards = shaped_rewards(usable, config)
    algorithm = config.algorithm
    group_of = {g.group_id: i for i, g in enumerate(groups)}
    group_index = torch.tensor([group_of[t.group_id] for t in usable])
    inputs = build_advantage_inputs(
        usable, rewards, group_index, tool_turn_reward=algorithm.tool_turn_reward,
        token_kl=token_kl if algorithm.kl_in_reward else None, kl_coef=algorithm.kl_coef, token_values=token_values,
    )
    advantages = compute_advantages(algorithm.advantage, inputs, **algorithm.advantage_params())
    if config.arpo.attribution == "hard" and (shared := branch_common_prefix(usable)) is not None:
        advantages = hard_attribution(advantages, shared)
    rows = [advantages[row, : len(t.token_ids)].tolist() for row, t in enumerate(usable)]
    scored = ScoredBatch(usable, rewards, rows, excluded, zero_std_group_fraction(rewards, group_index))
    if inputs.values is not None:
        _, returns = gae(inputs.token_rewards, inputs.values, inputs.response_mask, gamma=algorithm.gamma, lam=algorithm.lam)
        scored.returns = [returns[row, : len(t.token_ids)].tolist() for row, t in enumerate(usable)]
        scored.old_values = [list(values) for values in token_values]
    return scored


def keep_groups(groups: list[TrajectoryGroup], config: TrainConfig) -> list[TrajectoryGroup]:
    """The groups ``algorithm.group_filter`` lets into the update, judged on the outcome
    rewards of their usable trajectories (as DAPO filters on accuracy, before shaping)."""
    algorithm = config.algorithm
    if algorithm.group_filter == "none":
        return groups
    members = [(i, t.reward) for i, g in enumerate(groups) for t in g.trajectories if t.infra_error is None]
    if not members:
        return []
    labels = torch.tensor([i for i, _ in members])
    keep = filter_groups(algorithm.group_filter, torch.tensor([r for _, r in members], dtype=torch.float32), labels, **algorithm.group_filter_params())
    kept = set(labels[keep].tolist())
    return [g for i, g in enumerate(groups) if i in kept]


def _sample_groups(trainer: RLTrainer, task_indices: list[int], seed: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """``group_size`` independent samples per task."""
    config = trainer.config
    return rollout(trainer.backend, trainer.make_env, task_indices, group_size=config.group_size, config=config.rollout, seed=seed), {}


def _sample_arpo(trainer: RLTrainer, task_indices: list[int], seed: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """ARPO's entropy-based branching with a budget of ``group_size`` per task."""
    config = trainer.config
    groups, stats = arpo_rollout(trainer.backend, trainer.make_env, task_indices, budget=config.group_size, params=config.arpo, config=config.rollout, seed=seed)
    return groups, stats.metrics()


ROLLOUT_MODES = {"group": _sample_groups, "arpo": _sample_arpo}
"""How a step samples its groups, by ``algorithm.rollout``: ``fn(trainer, task_indices, seed) -> (groups, metrics)``."""


class NonFiniteError(RuntimeError):
    """Too many non-finite losses or gradient norms in a row: the run cannot go on."""


class RLTrainer:
    """Owns the policy, its optimizer and the task schedule; ``step()`` runs one RL step."""

    def __init__(self, config: TrainConfig, model, tokenizer, backend, make_env: Callable[[], Env], task_indices: list[int]) -> None:
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.backend = backend
        self.make_env = make_env
        self.task_schedule = TaskSchedule(task_indices, seed=config.seed)
        apply_speed_options(model, gradient_checkpointing=config.gradient_checkpointing, compile=config.compile)
        self.optimizer = make_optimizer(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        updates = config.steps * config.ppo_epochs * config.mini_batches
        self.scheduler = make_scheduler(self.optimizer, warmup_steps=config.optim.warmup_steps, total_steps=updates, schedule=config.optim.schedule)
        self.reference = self._reference_policy()
        algorithm = config.algorithm
        self.critic = Critic(model, algorithm.critic, lr=algorithm.critic_lr) if algorithm.critic != "none" else None
        self.step_index = 0
        self.nonfinite_in_a_row = 0
        self.response_length_history: list[float] = []

    def _reference_policy(self):
        """None when KL is off. With LoRA the base model with adapters disabled is the
        reference (no second copy); otherwise a frozen copy of the initial weights."""
        if not self.config.algorithm.kl_coef:
            return None
        if self.config.lora.enabled:
            return "adapters-disabled"
        reference = copy.deepcopy(self.model).eval()
        for parameter in reference.parameters():
            parameter.requires_grad_(False)
        return reference

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
            "nonfinite_in_a_row": self.nonfinite_in_a_row,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }
        if self.critic is not None:
            state["critic_optimizer"] = self.critic.optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.step_index = int(state["step"])
        self.task_schedule.load_state_dict(state["task_schedule"])
        self.response_length_history = list(state.get("response_length_history", []))
        self.nonfinite_in_a_row = int(state.get("nonfinite_in_a_row", 0))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.critic is not None:
            self.critic.optimizer.load_state_dict(state["critic_optimizer"])

    def step(self) -> tuple[dict[str, float], list[TrajectoryGroup]]:
        config = self.config
        started = time.monotonic()
        groups, kept, sampling_metrics = self._sample()
        rollout_time = time.monotonic() - started
        usable = usable_trajectories(kept)
        token_values = self._token_values(usable) if self.critic is not None and usable else None
        token_kl = self._token_kl(usable) if config.algorithm.kl_in_reward and self.reference is not None and usable else None
        scored = score(kept, config, token_values=token_values, token_kl=token_kl)
        metrics = self._rollout_metrics(groups, scored)
        metrics.update(sampling_metrics)
        if token_kl is not None:
            metrics["reward_kl"] = sum(map(sum, token_kl)) / max(sum(t.response_tokens for t in usable), 1)
        metrics.update(step_diagnostics([t for g in groups for t in g.trajectories], response_length_history=self.response_length_history))
        self.response_length_history.append(metrics["response_length"])
        update_started = time.monotonic()
        total = sum(len(g.trajectories) for g in kept)
        failed_fraction = scored.excluded / max(total, 1)
        metrics["skipped_infra"] = float(failed_fraction > config.max_failed_fraction)
        if scored.trajectories and not metrics["skipped_infra"]:
            metrics.update(self.update(scored))
            self.backend.sync_weights(self.model)  # the next rollouts sample from the new weights
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

    def _sample(self) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup], dict[str, float]]:
        """(every sampled group, the groups kept for the update, metrics).

        Each generation round samples tasks for the groups still missing and filters them
        with ``algorithm.group_filter``; rounds go on until ``tasks_per_step`` groups are
        kept or ``algorithm.max_generation_rounds`` is reached (DAPO dynamic sampling).
        """
        config, algorithm = self.config, self.config.algorithm
        sampled: list[TrajectoryGroup] = []
        kept: list[TrajectoryGroup] = []
        metrics: dict[str, float] = {}
        rounds = 0
        while rounds < algorithm.max_generation_rounds and len(kept) < config.tasks_per_step:
            task_indices = self.task_schedule.next(config.tasks_per_step - len(kept))
            # Round 0 keeps the seed a run without resampling uses; later rounds get fresh ones.
            seed = derive_seed(config.seed, "rl-step", self.step_index, round=rounds)
            groups, round_metrics = ROLLOUT_MODES[algorithm.rollout](self, task_indices, seed)
            for key, value in round_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + value
            sampled += groups
            kept += keep_groups(groups, config)
            rounds += 1
        metrics = {key: value / rounds for key, value in metrics.items()}  # the rollout mode's metrics, averaged over rounds
        if algorithm.group_filter != "none":
            metrics.update(generation_rounds=float(rounds), groups_sampled=float(len(sampled)), groups_kept=float(min(len(kept), config.tasks_per_step)))
        return sampled, kept[: config.tasks_per_step], metrics

    def _per_token_rows(self, trajectories: list[Trajectory], compute: Callable[[TokenBatch], torch.Tensor], extra: str | None = None) -> list[list[float]]:
        """``compute(batch) -> [b, T]`` over length-bucketed micro-batches, without gradients,
        as one row per trajectory aligned with its token_ids. ``extra`` names a per-token
        trajectory field (e.g. "sampler_logprobs") put into ``batch.per_token``."""
        lengths = [len(t.token_ids) for t in trajectories]
        rows: dict[int, list[float]] = {}
        with torch.no_grad():
            for bucket in length_buckets(lengths, self.config.micro_batch_tokens, len(trajectories)):
                members = [trajectories[i] for i in bucket]
                values = {extra: [getattr(t, extra) for t in members]} if extra else None
                batch = collate([t.token_ids for t in members], [t.loss_mask for t in members], pad_token_id=self.tokenizer.pad_token_id, per_token=values).to(self.device)
                out = compute(batch)
                for row, i in enumerate(bucket):
                    rows[i] = out[row, : lengths[i]].tolist()
        return [rows[i] for i in range(len(trajectories))]

    def _token_values(self, trajectories: list[Trajectory]) -> list[list[float]]:
        """Critic values V(s_t) at sampled tokens before the update (GAE's values and the
        value-clipping anchor)."""
        self.critic.train(False)
        return self._per_token_rows(trajectories, lambda batch: self.critic.values(batch.input_ids, batch.attention_mask, batch.loss_mask))

    def _token_kl(self, trajectories: list[Trajectory]) -> list[list[float]]:
        """Per-token KL(pi_old || ref) estimates at sampled tokens, with the sampler's
        log-probs as pi_old (the tokens were drawn from it: no extra policy forward)."""
        estimator = self.config.algorithm.kl_estimator

        def compute(batch: TokenBatch) -> torch.Tensor:
            reference, _ = self._logprobs(batch, reference=True)
            return kl_penalty(batch.per_token["sampler_logprobs"], reference, estimator) * batch.loss_mask

        return self._per_token_rows(trajectories, compute, extra="sampler_logprobs")

    def _rollout_metrics(self, groups: list[TrajectoryGroup], scored: ScoredBatch) -> dict[str, float]:
        summary = aggregate_metrics([g.trajectories for g in groups], k=1)
        usable = usable_trajectories(groups)
        rewards = shaped_rewards(usable, self.config)
        group_of = {g.group_id: i for i, g in enumerate(groups)}
        return {
            "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "accuracy": summary["avg@1"],
            "response_length": summary["mean_response_tokens"],
            "mean_turns": summary["mean_turns"],
            "tool_calls_per_episode": summary["tool_calls_per_episode"],
            "tool_success_rate": summary["tool_success_rate"],
            "malformed_call_rate": summary["malformed_call_rate"],
            "frac_zero_std_groups": zero_std_group_fraction(rewards, torch.tensor([group_of[t.group_id] for t in usable])) if usable else 0.0,
            "infra_errors": float(scored.excluded),
        }

    def _batch(self, trajectories: list[Trajectory], advantages: list[list[float]]) -> TokenBatch:
        return collate(
            [t.token_ids for t in trajectories],
            [t.loss_mask for t in trajectories],
            pad_token_id=self.tokenizer.pad_token_id,
            per_token={"advantages": advantages},
        )

    def _logprobs(self, batch: TokenBatch, *, with_entropy: bool = False, reference: bool = False):
        model = self.model if not reference or self.reference == "adapters-disabled" else self.reference
        adapters_off = self.model.disable_adapter() if reference and self.reference == "adapters-disabled" else nullcontext()
        with adapters_off:
            return token_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask, temperature=max(self.config.rollout.temperature, 1e-6) if self.config.rollout.temperature > 0 else 1.0, with_entropy=with_entropy)

    def update(self, scored: ScoredBatch) -> dict[str, float]:
        """PPO epochs over mini-batches, each split into length-bucketed micro-batches
        whose losses add up exactly to the mini-batch loss (global normalisers)."""
        config, algorithm = self.config, self.config.algorithm
        trajectories = scored.trajectories
        lengths = [len(t.token_ids) for t in trajectories]
        order = torch.randperm(len(trajectories), generator=torch.Generator().manual_seed(config.seed + self.step_index)).tolist()
        minis = [order[i :: config.mini_batches] for i in range(config.mini_batches)]
        single_update = config.ppo_epochs * config.mini_batches == 1
        old_logprobs: dict[int, list[float]] = {}
        self.model.train()
        critic = self.critic
        if critic is not None:
            critic.train(True)
        if not single_update:
            # The policy changes between updates, so the ratio needs the pre-update
            # log-probs; with one update they equal the current ones (ratio exactly 1).
            with torch.no_grad():
                for bucket in length_buckets(lengths, config.micro_batch_tokens, len(trajectories)):
                    batch = self._batch([trajectories[i] for i in bucket], [scored.advantages[i] for i in bucket]).to(self.device)
                    values, _ = self._logprobs(batch)
                    for row, i in enumerate(bucket):
                        old_logprobs[i] = values[row, : lengths[i]].tolist()
        totals: dict[str, float] = {"loss": 0.0}
        entropy_rows: dict[int, list[float]] = {}
        weight = 0.0
        grad_norms = []
        critic_norms: list[float] = []
        skipped = 0
        for _ in range(config.ppo_epochs):
            for mini in minis:
                num_tokens = float(sum(sum(trajectories[i].loss_mask) for i in mini))
                self.optimizer.zero_grad(set_to_none=True)
                if critic is not None:
                    critic.optimizer.zero_grad(set_to_none=True)
                mini_loss = 0.0
                for bucket in length_buckets([lengths[i] for i in mini], config.micro_batch_tokens, len(mini)):
                    members = [mini[j] for j in bucket]
                    batch = self._batch([trajectories[i] for i in members], [scored.advantages[i] for i in members])
                    if not single_update:
                        batch.per_token["old_logprobs"] = collate([trajectories[i].token_ids for i in members], [trajectories[i].loss_mask for i in members], pad_token_id=0, per_token={"v": [old_logprobs[i] for i in members]}).per_token["v"]
                    if critic is not None:
                        critic_rows = {"returns": [scored.returns[i] for i in members], "old_values": [scored.old_values[i] for i in members]}
                        batch.per_token.update(collate([trajectories[i].token_ids for i in members], [trajectories[i].loss_mask for i in members], pad_token_id=0, per_token=critic_rows).per_token)
                    batch = batch.to(self.device)
                    shared_values = critic.values_from_policy_forward(batch.loss_mask) if critic is not None and critic.mode == "shared" else nullcontext({})
                    with shared_values as captured:
                        logprobs, entropy = self._logprobs(batch, with_entropy=True)
                    for row, i in enumerate(members):
                        entropy_rows.setdefault(i, entropy[row, : lengths[i]].tolist())
                    old = logprobs.detach() if single_update else batch.per_token["old_logprobs"]
                    normalisers = dict(num_tokens=num_tokens, num_sequences=float(len(mini)), norm_length=float(config.rollout.max_total_tokens))
                    out = compute_policy_loss(algorithm.policy_loss, logprobs, old, batch.per_token["advantages"], batch.loss_mask, **algorithm.policy_loss_params(), **normalisers)
                    loss = out.loss
                    micro_tokens = float(batch.loss_mask.sum())
                    if self.reference is not None and not algorithm.kl_in_reward:
                        with torch.no_grad():
                            reference_logprobs, _ = self._logprobs(batch, reference=True)
                        kl = kl_penalty(logprobs, reference_logprobs, algorithm.kl_estimator)
                        loss = loss + algorithm.kl_coef * aggregate(kl, batch.loss_mask, algorithm.aggregation, **normalisers)
                        totals["kl"] = totals.get("kl", 0.0) + float((kl.detach() * batch.loss_mask).sum())
                    if critic is not None:
                        values = captured["values"] if critic.mode == "shared" else critic.values(batch.input_ids, batch.attention_mask, batch.loss_mask)
                        critic_loss, critic_metrics = value_loss(
                            values, batch.per_token["old_values"], batch.per_token["returns"], batch.loss_mask,
                            clip_range=algorithm.value_clip or None, aggregation=algorithm.aggregation, **normalisers,
                        )
                        loss = loss + algorithm.value_loss_coef * critic_loss
                        totals["value_loss"] = totals.get("value_loss", 0.0) + float(critic_loss.detach()) * micro_tokens / max(num_tokens, 1.0)
                        for key, value in critic_metrics.items():
                            totals[key] = totals.get(key, 0.0) + value * micro_tokens
                    loss.backward()
                    mini_loss += float(loss.detach())
                    totals["entropy"] = totals.get("entropy", 0.0) + float((entropy * batch.loss_mask).sum())
                    for key in ("clip_frac_low", "clip_frac_high", "ratio_mean", "approx_kl"):
                        totals[key] = totals.get(key, 0.0) + out.metrics[key] * micro_tokens
                    weight += micro_tokens
                grad_norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], config.optim.max_grad_norm)
                if critic is not None:
                    critic_norm = float(torch.nn.utils.clip_grad_norm_(critic.parameters(), config.optim.max_grad_norm))
                    critic_norms.append(critic_norm)
                    grad_norm = grad_norm if math.isfinite(critic_norm) else torch.tensor(float("nan"))
                grad_norms.append(float(grad_norm))
                if not (math.isfinite(float(grad_norm)) and math.isfinite(mini_loss)):
                    # A NaN/inf must never reach the weights: drop this update, count it.
                    self.optimizer.zero_grad(set_to_none=True)
                    if critic is not None:
                        critic.optimizer.zero_grad(set_to_none=True)
                    skipped += 1
                    self.nonfinite_in_a_row += 1
                    if self.nonfinite_in_a_row >= config.max_nonfinite_steps:
                        raise NonFiniteError(f"{self.nonfinite_in_a_row} non-finite losses or gradient norms in a row (last grad norm {float(grad_norm)}); lower optim.lr or check the rewards")
                    continue
                self.nonfinite_in_a_row = 0
                totals["loss"] += mini_loss
                self.optimizer.step()
                self.scheduler.step()
                if critic is not None:
                    critic.optimizer.step()
        self.model.eval()
        if critic is not None:
            critic.train(False)
        updates = config.ppo_epochs * config.mini_batches
        metrics = {key: value / max(weight, 1.0) for key, value in totals.items() if key not in ("loss", "value_loss")}
        metrics["loss"] = totals["loss"] / max(updates - skipped, 1)
        if critic is not None:
            metrics["value_loss"] = totals.get("value_loss", 0.0) / max(updates, 1)
            metrics["critic_grad_norm"] = sum(critic_norms) / len(critic_norms) if critic_norms else float("nan")
        finite = [g for g in grad_norms if math.isfinite(g)]
        metrics["grad_norm"] = sum(finite) / len(finite) if finite else float("nan")
        metrics["skipped_nonfinite"] = float(skipped)
        metrics["lr"] = self.scheduler.get_last_lr()[0]
        metrics.setdefault("kl", 0.0)
        order = sorted(entropy_rows)
        after_tool = mean_first_tokens_after_tool_entropy([entropy_rows[i] for i in order], [trajectories[i] for i in order], m=8)
        if after_tool is not None:
            metrics["entropy_after_tool"] = after_tool
        return metrics

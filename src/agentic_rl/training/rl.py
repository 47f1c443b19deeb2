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

from agentic_rl.algorithms import AdvantageInputs, aggregate, compute_advantages, kl_penalty, overlong_penalty, policy_loss, zero_std_group_fraction
from agentic_rl.algorithms.arpo import hard_attribution
from agentic_rl.config import TrainConfig
from agentic_rl.envs.base import Env
from agentic_rl.evaluation.metrics import aggregate_metrics
from agentic_rl.rollout.arpo import arpo_rollout, branch_common_prefix
from agentic_rl.rollout.engine import rollout
from agentic_rl.training.batch import TokenBatch, collate, length_buckets
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.optim import make_optimizer, make_scheduler
from agentic_rl.tracking.diagnostics import mean_first_tokens_after_tool_entropy, step_diagnostics
from agentic_rl.training.sampler import TaskSampler
from agentic_rl.types import Trajectory, TrajectoryGroup


@dataclass
class ScoredBatch:
    """The trajectories that enter the loss, with one reward and one advantage row each."""

    trajectories: list[Trajectory]
    rewards: torch.Tensor  # [N] outcome reward + shaping
    advantages: list[list[float]] = field(default_factory=list)  # per token, aligned with token_ids
    excluded: int = 0  # infrastructure failures kept out of the loss
    frac_zero_std_groups: float = 0.0


def score(groups: list[TrajectoryGroup], config: TrainConfig) -> ScoredBatch:
    """Rewards (with soft overlong punishment) and advantages for the usable trajectories.

    Trajectories whose env or tool crashed (``infra_error``) leave the batch: the policy
    did not cause them, so they must not be scored.
    """
    usable = [t for g in groups for t in g.trajectories if t.infra_error is None]
    excluded = sum(len(g.trajectories) for g in groups) - len(usable)
    if not usable:
        return ScoredBatch([], torch.zeros(0), excluded=excluded)
    rewards = torch.tensor([t.reward for t in usable], dtype=torch.float32)
    algorithm = config.algorithm
    if algorithm.overlong_buffer:
        # Length after the prompt against the room the token limit leaves: penalises
        # episodes that run into truncation (DAPO's soft overlong punishment).
        lengths = torch.tensor([len(t.token_ids) - t.prompt_length for t in usable])
        room = config.rollout.max_total_tokens - min(t.prompt_length for t in usable)
        rewards = rewards + overlong_penalty(lengths, room, min(algorithm.overlong_buffer, room))
    group_of = {g.group_id: i for i, g in enumerate(groups)}
    group_index = torch.tensor([group_of[t.group_id] for t in usable])
    width = max(len(t.token_ids) for t in usable)
    response_mask = torch.zeros((len(usable), width))
    for row, t in enumerate(usable):
        response_mask[row, : len(t.loss_mask)] = torch.tensor(t.loss_mask, dtype=torch.float32)
    advantages = compute_advantages(
        algorithm.advantage,
        AdvantageInputs(rewards=rewards, response_mask=response_mask, group_index=group_index),
        normalize_by_std=algorithm.normalize_by_std,
    )
    if config.arpo.attribution == "hard" and (shared := branch_common_prefix(usable)) is not None:
        advantages = hard_attribution(advantages, shared)
    rows = [advantages[row, : len(t.token_ids)].tolist() for row, t in enumerate(usable)]
    return ScoredBatch(usable, rewards, rows, excluded, zero_std_group_fraction(rewards, group_index))


def _sample_groups(trainer: RLTrainer, task_indices: list[int], limits) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """``group_size`` independent samples per task."""
    return rollout(trainer.backend, trainer.make_env, task_indices, group_size=trainer.config.group_size, limits=limits), {}


def _sample_arpo(trainer: RLTrainer, task_indices: list[int], limits) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """ARPO's entropy-based branching with a budget of ``group_size`` per task."""
    config = trainer.config
    groups, stats = arpo_rollout(trainer.backend, trainer.make_env, task_indices, budget=config.group_size, params=config.arpo.params(seed=limits.seed), limits=limits)
    return groups, stats.metrics()


SAMPLERS = {"group": _sample_groups, "arpo": _sample_arpo}
"""How a step samples its groups, by ``algorithm.rollout``: ``fn(trainer, task_indices, limits) -> (groups, metrics)``."""


class NonFiniteError(RuntimeError):
    """Too many non-finite losses or gradient norms in a row: the run cannot go on."""


class RLTrainer:
    """Owns the policy, its optimizer and the task sampler; ``step()`` runs one RL step."""

    def __init__(self, config: TrainConfig, model, tokenizer, backend, make_env: Callable[[], Env], task_indices: list[int]) -> None:
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.backend = backend
        self.make_env = make_env
        self.sampler = TaskSampler(task_indices, seed=config.seed)
        self.optimizer = make_optimizer(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        updates = config.steps * config.ppo_epochs * config.mini_batches
        self.scheduler = make_scheduler(self.optimizer, warmup_steps=config.optim.warmup_steps, total_steps=updates, schedule=config.optim.schedule)
        self.reference = self._reference_policy()
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

    def step(self) -> tuple[dict[str, float], list[TrajectoryGroup]]:
        config = self.config
        started = time.monotonic()
        task_indices = self.sampler.next(config.tasks_per_step)
        limits = config.rollout.limits(seed=config.seed * 100_003 + self.step_index)
        groups, sampling_metrics = SAMPLERS[config.algorithm.rollout](self, task_indices, limits)
        rollout_time = time.monotonic() - started
        scored = score(groups, config)
        metrics = self._rollout_metrics(groups, scored)
        metrics.update(sampling_metrics)
        metrics.update(step_diagnostics([t for g in groups for t in g.trajectories], response_length_history=self.response_length_history))
        self.response_length_history.append(metrics["response_length"])
        update_started = time.monotonic()
        total = sum(len(g.trajectories) for g in groups)
        failed_fraction = scored.excluded / max(total, 1)
        metrics["skipped_infra"] = float(failed_fraction > config.max_failed_fraction)
        if scored.trajectories and not metrics["skipped_infra"]:
            metrics.update(self.update(scored))
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

    def _rollout_metrics(self, groups: list[TrajectoryGroup], scored: ScoredBatch) -> dict[str, float]:
        summary = aggregate_metrics([g.trajectories for g in groups], k=1)
        rewards = scored.rewards
        return {
            "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "accuracy": summary["avg@1"],
            "response_length": summary["mean_response_tokens"],
            "mean_turns": summary["mean_turns"],
            "tool_calls_per_episode": summary["tool_calls_per_episode"],
            "tool_success_rate": summary["tool_success_rate"],
            "malformed_call_rate": summary["malformed_call_rate"],
            "frac_zero_std_groups": scored.frac_zero_std_groups,
            "infra_errors": float(scored.excluded),
        }

    def _batch(self, trajectories: list[Trajectory], advantages: list[list[float]]) -> TokenBatch:
        return collate(
            [t.token_ids for t in trajectories],
            [t.loss_mask for t in trajectories],
            pad_token_id=self.tokenizer.pad_token_id,
            values={"advantages": advantages},
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
        skipped = 0
        for _ in range(config.ppo_epochs):
            for mini in minis:
                num_tokens = float(sum(sum(trajectories[i].loss_mask) for i in mini))
                self.optimizer.zero_grad(set_to_none=True)
                mini_loss = 0.0
                for bucket in length_buckets([lengths[i] for i in mini], config.micro_batch_tokens, len(mini)):
                    members = [mini[j] for j in bucket]
                    batch = self._batch([trajectories[i] for i in members], [scored.advantages[i] for i in members])
                    if not single_update:
                        batch.values["old_logprobs"] = collate([trajectories[i].token_ids for i in members], [trajectories[i].loss_mask for i in members], pad_token_id=0, values={"v": [old_logprobs[i] for i in members]}).values["v"]
                    batch = batch.to(self.device)
                    logprobs, entropy = self._logprobs(batch, with_entropy=True)
                    for row, i in enumerate(members):
                        entropy_rows.setdefault(i, entropy[row, : lengths[i]].tolist())
                    old = logprobs.detach() if single_update else batch.values["old_logprobs"]
                    normalisers = dict(num_tokens=num_tokens, num_sequences=float(len(mini)), norm_length=float(config.rollout.max_total_tokens))
                    out = policy_loss(
                        logprobs, old, batch.values["advantages"], batch.loss_mask,
                        clip_low=algorithm.clip_low, clip_high=algorithm.clip_high, clip_ratio_c=algorithm.clip_ratio_c,
                        aggregation=algorithm.aggregation, **normalisers,
                    )
                    loss = out.loss
                    micro_tokens = float(batch.loss_mask.sum())
                    if self.reference is not None:
                        with torch.no_grad():
                            reference_logprobs, _ = self._logprobs(batch, reference=True)
                        kl = kl_penalty(logprobs, reference_logprobs, algorithm.kl_estimator)
                        loss = loss + algorithm.kl_coef * aggregate(kl, batch.loss_mask, algorithm.aggregation, **normalisers)
                        totals["kl"] = totals.get("kl", 0.0) + float((kl.detach() * batch.loss_mask).sum())
                    loss.backward()
                    mini_loss += float(loss.detach())
                    totals["entropy"] = totals.get("entropy", 0.0) + float((entropy * batch.loss_mask).sum())
                    for key in ("clip_frac_low", "clip_frac_high", "ratio_mean", "approx_kl"):
                        totals[key] = totals.get(key, 0.0) + out.metrics[key] * micro_tokens
                    weight += micro_tokens
                grad_norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], config.optim.max_grad_norm)
                grad_norms.append(float(grad_norm))
                if not (math.isfinite(float(grad_norm)) and math.isfinite(mini_loss)):
                    # A NaN/inf must never reach the weights: drop this update, count it.
                    self.optimizer.zero_grad(set_to_none=True)
                    skipped += 1
                    self.nonfinite_in_a_row += 1
                    if self.nonfinite_in_a_row >= config.max_nonfinite_steps:
                        raise NonFiniteError(f"{self.nonfinite_in_a_row} non-finite losses or gradient norms in a row (last grad norm {float(grad_norm)}); lower optim.lr or check the rewards")
                    continue
                self.nonfinite_in_a_row = 0
                totals["loss"] += mini_loss
                self.optimizer.step()
                self.scheduler.step()
        self.model.eval()
        updates = config.ppo_epochs * config.mini_batches
        metrics = {key: value / max(weight, 1.0) for key, value in totals.items() if key != "loss"}
        metrics["loss"] = totals["loss"] / max(updates - skipped, 1)
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

"""The metrics an RL step logs: what its rollouts scored, and what its update did."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from agentic_rl.algorithms import zero_std_group_fraction
from agentic_rl.evaluation.metrics import aggregate_metrics, episode_metrics_means
from agentic_rl.templates.drift import template_drift_mean
from agentic_rl.tracking.diagnostics import mean_first_tokens_after_tool_entropy
from agentic_rl.training.optim import StepOutcome
from agentic_rl.training.scoring import usable_trajectories
from agentic_rl.types import Trajectory, TrajectoryGroup

MACHINE_METRICS = (
    "step_time_s",
    "rollout_time_s",
    "update_time_s",
    "weight_sync_time_s",
    "tokens_per_s",
    "host_rss_gb",
    "host_memory_released_gb",
    "device_peak_gb",
)
"""Step metrics that measure the machine, not the run: they differ between runs of the
same seed (compare runs without them)."""


ENV_TOOL_METRICS = ("tool_calls_per_episode", "tool_success_rate", "malformed_call_rate")
"""``rollout_metrics`` of the tool calls an env ran and parsed: an agent program runs its
tools itself (its step metrics carry ``calls_per_episode``, model calls through the
gateway, instead), so for agent runs these are meaningless and left out."""


def rollout_metrics(groups: list[TrajectoryGroup], rewards: torch.Tensor, *, excluded: int) -> dict[str, float]:
    """Rewards, accuracy and episode shape of every sampled group (filtered ones too).
    ``rewards`` [N]: the shaped rewards of ``usable_trajectories(groups)``; ``excluded``:
    trajectories kept out of the update for infrastructure errors. The env's own episode
    metrics (``search/answer_recall``, ``reflection/correct_at_1``, ``memory/writes``...)
    follow under their names, so behaviour the eval reports can be watched during training."""
    summary = aggregate_metrics([g.trajectories for g in groups], k=1)
    usable = usable_trajectories(groups)
    group_of = {g.group_id: i for i, g in enumerate(groups)}
    return {
        "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
        "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "accuracy": summary["avg@1"],
        "response_length": summary["mean_response_tokens"],
        "mean_turns": summary["mean_turns"],
        "segments_per_episode": summary["mean_segments"],
        "summaries_per_episode": summary["mean_summaries"],
        "template_drift_tokens": template_drift_mean([t for g in groups for t in g.trajectories]),
        "tool_calls_per_episode": summary["tool_calls_per_episode"],
        "tool_success_rate": summary["tool_success_rate"],
        "malformed_call_rate": summary["malformed_call_rate"],
        "frac_zero_std_groups": zero_std_group_fraction(rewards, torch.tensor([group_of[t.group_id] for t in usable]))
        if usable
        else 0.0,
        "infra_errors": float(excluded),
        **episode_metrics_means([t for g in groups for t in g.trajectories]),
    }


def per_env_metrics(
    groups: list[TrajectoryGroup],
    rewards: torch.Tensor,
    label_of: Callable[[TrajectoryGroup], str | None],
    labels: list[str],
) -> dict[str, float]:
    """``rollout_metrics`` of each env's groups, with the env's label as suffix
    (``reward_mean@arithmetic``), and ``mix_share@label``: its share of the step's groups.
    ``rewards`` as for ``rollout_metrics``; an env with no group this step has only its share."""
    usable_labels = [label_of(g) for g in groups for t in g.trajectories if t.infra_error is None]
    out: dict[str, float] = {}
    for label in labels:
        members = [g for g in groups if label_of(g) == label]
        out[f"mix_share@{label}"] = len(members) / len(groups) if groups else 0.0
        if not members:
            continue
        mask = torch.tensor([owner == label for owner in usable_labels], dtype=torch.bool)
        excluded = sum(t.infra_error is not None for g in members for t in g.trajectories)
        metrics = rollout_metrics(members, rewards[mask] if len(rewards) else rewards, excluded=excluded)
        out.update({f"{key}@{label}": value for key, value in metrics.items()})
    return out


class UpdateTally:
    """Sums over an update's micro-batches and optimizer steps, turned into its metrics
    by :meth:`metrics`: per-token means (weighted by loss tokens), the mean loss of the
    steps taken, mean gradient norms, and the steps skipped as non-finite."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {"loss": 0.0}
        self.maxima: dict[str, float] = {}  # reported as the largest value seen, not a mean
        self.weight = 0.0  # loss tokens seen, over all micro-batches
        self.entropy_rows: dict[int, list[float]] = {}  # per trajectory, from its first forward
        self.grad_norms: list[float] = []
        self.critic_norms: list[float] = []
        self.skipped = 0

    def add_micro_batch(
        self,
        sums: dict[str, float],
        loss_tokens: float,
        members: list[int],
        entropy: torch.Tensor,
        lengths: list[int],
        maxima: dict[str, float] | None = None,
    ) -> None:
        """``sums``: the micro-batch's contributions to the totals; ``entropy`` [b, T] for
        the trajectories ``members`` (their token counts ``lengths``); ``maxima``: values
        whose update-wide maximum is the metric."""
        for key, value in (maxima or {}).items():
            self.maxima[key] = max(self.maxima.get(key, value), value)
        for row, (i, length) in enumerate(zip(members, lengths)):
            self.entropy_rows.setdefault(i, entropy[row, :length].tolist())
        for key, value in sums.items():
            self.totals[key] = self.totals.get(key, 0.0) + value
        self.weight += loss_tokens

    def merge_ranks(self, dist) -> None:
        """Combine every data-parallel rank's sums (each saw its own micro-batches) so each
        rank reports the metrics of the whole update; one process: nothing to do."""
        if not dist.distributed:
            return
        parts = dist.all_gather_objects((self.totals, self.weight, self.maxima, self.entropy_rows))
        loss = self.totals["loss"]  # already the sum over ranks (accumulate_and_step reduced it)
        self.totals, self.weight, self.maxima, self.entropy_rows = {}, 0.0, {}, {}
        for totals, weight, maxima, rows in parts:
            for key, value in totals.items():
                self.totals[key] = self.totals.get(key, 0.0) + value
            self.weight += weight
            for key, value in maxima.items():
                self.maxima[key] = max(self.maxima.get(key, value), value)
            self.entropy_rows.update(rows)
        self.totals["loss"] = loss

    def add_step(self, outcome: StepOutcome) -> None:
        """One optimizer step; a second norm is the critic's."""
        if len(outcome.norms) > 1:
            self.critic_norms.append(outcome.norms[1])
        self.grad_norms.append(outcome.grad_norm)
        if outcome.skipped:
            self.skipped += 1
        else:
            self.totals["loss"] += outcome.loss

    def metrics(self, *, updates: int, critic: bool, lr: float, trajectories: list[Trajectory]) -> dict[str, float]:
        """``updates``: optimizer steps attempted; ``lr``: the learning rate after them;
        ``trajectories``: the scored batch (for the entropy after tool results)."""
        metrics = {
            key: value / max(self.weight, 1.0)
            for key, value in self.totals.items()
            if key not in ("loss", "value_loss")
        }
        metrics["loss"] = self.totals["loss"] / max(updates - self.skipped, 1)
        metrics.update(self.maxima)
        if critic:
            metrics["value_loss"] = self.totals.get("value_loss", 0.0) / max(updates, 1)
            metrics["critic_grad_norm"] = (
                sum(self.critic_norms) / len(self.critic_norms) if self.critic_norms else float("nan")
            )
        finite = [g for g in self.grad_norms if math.isfinite(g)]
        metrics["grad_norm"] = sum(finite) / len(finite) if finite else float("nan")
        metrics["skipped_nonfinite"] = float(self.skipped)
        metrics["lr"] = lr
        metrics.setdefault("kl", 0.0)
        order = sorted(self.entropy_rows)
        after_tool = mean_first_tokens_after_tool_entropy(
            [self.entropy_rows[i] for i in order], [trajectories[i] for i in order], m=8
        )
        if after_tool is not None:
            metrics["entropy_after_tool"] = after_tool
        return metrics


def forward_only_metrics(
    per_token_rows: Callable[..., list[list[float]]],
    logprobs: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
    trajectories: list[Trajectory],
    *,
    lockstep: bool,
) -> dict[str, float]:
    """``entropy`` and the sampler-mismatch metrics (``rollout_logprob_diff_mean`` / ``_max``,
    ``rollout_kl_k3``) of ``trajectories`` from gradient-free forwards (the trainer's
    ``TrajectoryForwards.per_token_rows`` and ``.logprobs``): a step whose update forwarded
    no token (every group scored alike, too many failures) still reports what shows why
    nothing learns."""
    from agentic_rl.algorithms.correction import mismatch_metrics

    totals = {"entropy": 0.0, "rollout_logprob_diff_mean": 0.0, "rollout_kl_k3": 0.0, "tokens": 0.0}
    largest = [0.0]

    def compute(batch) -> torch.Tensor:
        current, entropy = logprobs(batch, with_entropy=True)
        mask, tokens = batch.loss_mask, float(batch.loss_mask.sum())
        if tokens:
            found = mismatch_metrics(current.float(), batch.per_token["sampler_logprobs"], mask)
            for key in ("rollout_logprob_diff_mean", "rollout_kl_k3"):
                totals[key] += found[key] * tokens
            largest[0] = max(largest[0], found["rollout_logprob_diff_max"])
            totals["entropy"] += float((entropy * mask).sum())
            totals["tokens"] += tokens
        return entropy

    if trajectories:
        per_token_rows(trajectories, compute, extra="sampler_logprobs", lockstep=lockstep)
    if not totals["tokens"]:
        return {}
    tokens = totals.pop("tokens")
    return {**{key: value / tokens for key, value in totals.items()}, "rollout_logprob_diff_max": largest[0]}

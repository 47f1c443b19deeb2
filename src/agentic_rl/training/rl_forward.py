"""The RL trainer's forward passes over trajectories, in length-bucketed micro-batches.

Both halves of an RL step forward the policy over sampled trajectories: scoring reads
per-token values without gradients (critic values, KL to the reference, pre-update
log-probs), and the update forwards with gradients. ``TrajectoryForwards`` holds what
every such pass needs (the strategy-wrapped policy, the tokenizer's padding token, the
ranks, the micro-batch size, the LoRA adapter of each trajectory) and turns trajectories
into micro-batches: each of one adapter, padded to as many on every rank where the
forward is collective. ``token_values`` and ``token_kl`` are scoring's two such passes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from agentic_rl.algorithms import kl_penalty
from agentic_rl.config import TrainConfig
from agentic_rl.distributed import DistContext
from agentic_rl.models.lora import select_adapter
from agentic_rl.models.precision import compute_precision
from agentic_rl.training.batch import TokenBatch, collate, keyed_length_buckets, micro_batch_overhead, padding_batch
from agentic_rl.training.reference import ReferencePolicy
from agentic_rl.training.value import Critic
from agentic_rl.types import Trajectory


class TrajectoryForwards:
    """The policy's forwards over trajectories, as the trainer's strategy runs them."""

    def __init__(self, config: TrainConfig, model, tokenizer, policy: Callable, dist: DistContext) -> None:
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.policy = policy
        """The trainable forward (log-probs of a batch) as the strategy runs it."""
        self.dist = dist
        self.adapter_of: Callable[[Trajectory], str] | None = None
        """The LoRA adapter that plays a trajectory's role (None: one policy)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def temperature(self) -> float:
        """The sampler's temperature, which the log-probs divide the logits by (1 for greedy)."""
        temperature = self.config.rollout.temperature
        return max(temperature, 1e-6) if temperature > 0 else 1.0

    def logprobs(self, batch: TokenBatch, *, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The policy's log-probs [b, T] (and entropies) of ``batch``'s loss tokens."""
        return self.policy(
            batch.input_ids,
            batch.attention_mask,
            batch.loss_mask,
            temperature=self.temperature,
            with_entropy=with_entropy,
        )

    def per_token_rows(
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
        buckets: list[tuple[str | None, list[int]] | None] = list(self.buckets(trajectories, lengths))
        if lockstep:
            buckets += [None] * self.dist.lockstep_padding(len(buckets))
        rows: dict[int, list[float]] = {}
        with torch.no_grad():
            for keyed in buckets:
                if keyed is None:
                    compute(self.padding_batch((extra,) if extra else ()))
                    continue
                bucket = self.use_adapter(*keyed)
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

    def buckets(self, trajectories: list[Trajectory], lengths: list[int]) -> list[tuple[str | None, list[int]]]:
        """Length-bucketed micro-batches of ``trajectories``, each of one adapter (``adapter_of``)."""
        keys = [self.adapter_of(t) if self.adapter_of else None for t in trajectories]
        return keyed_length_buckets(
            keys,
            lengths,
            self.config.rl.micro_batch_tokens,
            len(trajectories),
            overhead_tokens=micro_batch_overhead(compute_precision(self.model)),
        )

    def use_adapter(self, adapter: str | None, bucket: list[int]) -> list[int]:
        if adapter is not None:
            select_adapter(self.model, adapter)
        return bucket

    def padding_batch(self, rows: tuple[str, ...] = ()) -> TokenBatch:
        return padding_batch(self.tokenizer.pad_token_id, rows).to(self.device)


def token_values(
    forwards: TrajectoryForwards, critic: Critic, trajectories: list[Trajectory], *, sharded: bool
) -> list[list[float]]:
    """Critic values V(s_t) at sampled tokens before the update (GAE's values and the
    value-clipping anchor). ``sharded``: the trainer's strategy shards the model."""
    critic.train(False)
    if critic.mode == "shared" and sharded:
        # A sharded backbone runs only inside the policy's wrapper: values from its forward.
        def compute(batch: TokenBatch) -> torch.Tensor:
            with critic.values_from_policy_forward(batch.loss_mask) as captured:
                forwards.logprobs(batch)
            return captured["values"]
    else:

        def compute(batch: TokenBatch) -> torch.Tensor:
            return critic.values(batch.input_ids, batch.attention_mask, batch.loss_mask)

    return forwards.per_token_rows(trajectories, compute, lockstep=sharded)


def token_kl(
    forwards: TrajectoryForwards, reference: ReferencePolicy, trajectories: list[Trajectory], estimator: str
) -> list[list[float]]:
    """Per-token KL(pi_old || ref) estimates at sampled tokens, with the sampler's
    log-probs as pi_old (the tokens were drawn from it: no extra policy forward)."""

    def compute(batch: TokenBatch) -> torch.Tensor:
        reference_logprobs = reference.logprobs(batch, forwards.temperature)
        return kl_penalty(batch.per_token["sampler_logprobs"], reference_logprobs, estimator) * batch.loss_mask

    return forwards.per_token_rows(
        trajectories, compute, extra="sampler_logprobs", lockstep=reference.forward is not None
    )

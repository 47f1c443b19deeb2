"""The RL update: PPO epochs over mini-batches of a scored batch, one optimizer step each.

``PolicyUpdate`` runs the update half of an RL step (the trainer samples and scores,
training/rl.py): it orders the scored trajectories into mini-batches, gives each rank its
share, gets the pre-update log-probs the later updates' ratios need (recomputed, or the
sampler's), and runs one accumulated optimizer step per mini-batch over length-bucketed
micro-batches whose losses (training/rl_loss.py) add up exactly to the mini-batch loss.
It owns no weights: the model, optimizers and critic are the trainer's, passed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext

import torch

from agentic_rl.config import TrainConfig
from agentic_rl.training.batch import TokenBatch, collate
from agentic_rl.training.optim import NonFiniteGuard, Optimized, accumulate_and_step, optimizer_params
from agentic_rl.training.reference import ReferencePolicy
from agentic_rl.training.rl_forward import TrajectoryForwards
from agentic_rl.training.rl_loss import micro_batch_loss
from agentic_rl.training.rl_metrics import UpdateTally
from agentic_rl.training.scoring import ScoredBatch
from agentic_rl.training.value import Critic


class PolicyUpdate:
    """PPO epochs over mini-batches of a ``ScoredBatch`` with the trainer's forwards,
    optimizer, scheduler and (optional) critic and reference."""

    def __init__(
        self,
        config: TrainConfig,
        forwards: TrajectoryForwards,
        *,
        strategy,
        optimizer: torch.optim.Optimizer,
        scheduler,
        critic: Critic | None,
        reference: ReferencePolicy | None,
        nonfinite: NonFiniteGuard,
        rollout_correction: str,
        old_logprobs: str,
        current_first: bool,
        skip_zero_advantage: bool,
    ) -> None:
        self.config = config
        self.forwards = forwards
        self.strategy = strategy
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.critic = critic
        self.reference = reference
        self.nonfinite = nonfinite
        self.rollout_correction = rollout_correction
        self.old_logprobs = old_logprobs
        self._current_first = current_first
        """Whether the first update reads the current log-probs as the pre-update ones."""
        self.skip_zero_advantage = skip_zero_advantage

    def _train_mode(self, mode: bool) -> None:
        self.forwards.model.train(mode)
        if self.critic is not None:
            self.critic.train(mode)

    def run(self, scored: ScoredBatch, step_index: int) -> dict[str, float]:
        """PPO epochs over mini-batches, each one optimizer step over length-bucketed
        micro-batches whose losses add up exactly to the mini-batch loss (global normalisers).
        ``step_index``: the RL step's, which seeds the mini-batches' order."""
        config, dist = self.config, self.forwards.dist
        order = torch.randperm(
            len(scored.trajectories), generator=torch.Generator().manual_seed(config.seed + step_index)
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
        rows = self.forwards.per_token_rows(
            [scored.trajectories[i] for i in members], lambda batch: self.forwards.logprobs(batch)[0], lockstep=True
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
            pad_token_id=self.forwards.tokenizer.pad_token_id,
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
        forwards = self.forwards
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
            list(forwards.buckets([trajectories[i] for i in share], lengths)) if share else [None]
        )
        buckets += [None] * forwards.dist.lockstep_padding(len(buckets))
        for index, keyed in enumerate(buckets):
            last = index == len(buckets) - 1
            with nullcontext() if last else self.strategy.accumulating(forwards.policy):
                if keyed is None:
                    rows = (
                        "advantages",
                        "sampler_logprobs",
                        *(("old_logprobs",) if old_logprobs is not None else ()),
                        *(("returns", "old_values") if self.critic is not None else ()),
                    )
                    loss, *_ = self._micro_batch_loss(forwards.padding_batch(rows), normalisers)
                    yield loss * 0.0
                    continue
                bucket = forwards.use_adapter(*keyed)
                members = [share[j] for j in bucket]
                batch = self._collate(scored, members, old_logprobs).to(forwards.device)
                loss, entropy, sums, maxima = self._micro_batch_loss(batch, normalisers)
                tally.add_micro_batch(
                    sums, float(batch.loss_mask.sum()), members, entropy, [lengths[j] for j in bucket], maxima
                )
                yield loss
        self.strategy.synchronize(forwards.policy)  # role adapters on several ranks: averaged here
        if self.critic is not None and not self.critic.sharded:
            # All backwards are done: a replicated critic (a DDP copy, a shared head) lives
            # outside the policy's wrapper; its gradients are averaged here.
            self.strategy.average_gradients(self.critic.parameters())

    def _micro_batch_loss(
        self, batch: TokenBatch, normalisers: dict[str, float]
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float], dict[str, float]]:
        """``rl_loss.micro_batch_loss`` of one micro-batch with this update's policy, critic,
        reference and correction."""
        return micro_batch_loss(
            batch,
            normalisers,
            self.forwards.logprobs,
            algorithm=self.config.algorithm,
            critic=self.critic,
            reference=self.reference,
            correction_mode=self.rollout_correction,
            temperature=self.forwards.temperature,
        )

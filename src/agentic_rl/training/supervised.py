"""The supervised training loop that SFT and DPO share.

Epochs over shuffled batches of a fixed data set; each data-parallel rank takes every
world-size-th item of a batch, in length-bounded micro-batches whose gradients accumulate
into one clipped optimizer step per batch (with the non-finite guard); each finite step
reports one metrics dict. What a training supplies is its :class:`Objective`: how its
items are measured and grouped into micro-batches, a micro-batch's loss, and the step's
metrics (and their names).
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from agentic_rl.anatomy import split_model
from agentic_rl.config import DPOConfig, SFTConfig
from agentic_rl.distributed import DistContext, Strategy, make_strategy
from agentic_rl.training.batch import padding_batch
from agentic_rl.training.logprobs import PolicyLogprobs
from agentic_rl.training.optim import (
    NonFiniteGuard,
    Optimized,
    StepOutcome,
    accumulate_and_step,
    make_optimizer,
    make_scheduler,
    optimizer_params,
)

Forward = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
"""The policy's log-prob forward as the strategy wraps it: ``(input_ids, attention_mask,
select) -> (logprobs [B, T], entropy)`` (:class:`~agentic_rl.training.logprobs.PolicyLogprobs`)."""

COMMON_METRICS = ("step", "epoch", "loss", "lr", "grad_norm")
"""What the loop itself knows of each step; an objective's ``metric_names`` place them."""


class Objective(Protocol):
    """What one supervised training supplies. Items are positions ``0..size-1`` in its data;
    a batch is a list of them, the same on every rank."""

    metric_names: tuple[str, ...]
    """The keys of each step's metrics dict, in order: any of :data:`COMMON_METRICS` and
    the keys :meth:`step_metrics` returns."""
    nonfinite_hint: str
    """Ends the error raised after too many non-finite steps in a row."""

    def normaliser(self, batch: list[int]) -> int:
        """What the micro-batch losses of ``batch`` are divided by (the whole batch's, on
        every rank, so accumulation and the ranks' sum are exact); 0 skips the batch."""
        ...

    def micro_batches(self, share: list[int]) -> list[list[int]]:
        """This rank's ``share`` of a batch as micro-batches (lists of items)."""
        ...

    def micro_loss(self, forward: Forward, members: list[int], normaliser: int) -> tuple[torch.Tensor, Any]:
        """The loss of the micro-batch ``members`` (already divided by ``normaliser``), and
        what :meth:`step_metrics` needs from it."""
        ...

    def step_metrics(self, batch: list[int], normaliser: int, details: list[Any], dist: DistContext) -> dict:
        """The step's own metrics from this rank's micro-batch ``details``; called on every
        rank after every optimizer step, non-finite ones included (it may gather over ranks)."""
        ...


@dataclass
class SupervisedRun:
    metrics: list[dict] = field(default_factory=list)
    """Each finite step's metrics dict (the one ``on_step`` was given a copy of)."""
    skipped_nonfinite: int = 0
    """Steps dropped for a non-finite loss or gradient norm (no weight changed)."""

    def values(self, name: str) -> list:
        """Metric ``name`` of every step, in order."""
        return [metrics[name] for metrics in self.metrics]


def shuffled_batches(size: int, batch_size: int, epochs: int, seed: int) -> Iterator[tuple[int, list[int]]]:
    """``(epoch, batch)``: each epoch a new shuffle of ``range(size)`` (one seeded stream for
    the whole run) cut into batches of ``batch_size`` (the last may be smaller)."""
    rng = random.Random(seed)
    for epoch in range(epochs):
        order = list(range(size))
        rng.shuffle(order)
        for start in range(0, size, batch_size):
            yield epoch, order[start : start + batch_size]


def step_record(names: tuple[str, ...], step: int, epoch: int, outcome: StepOutcome, own: dict) -> dict:
    """One step's metrics dict: the keys ``names``, from the loop's values and ``own``."""
    values = dict(zip(COMMON_METRICS, (step, epoch, outcome.loss, outcome.lr, outcome.grad_norm)), **own)
    return {name: values[name] for name in names}


def padding_loss(forward: Forward, pad_id: int, device: torch.device) -> torch.Tensor:
    """A zero loss through a padding forward/backward that the other ranks' collectives wait for."""
    pad = padding_batch(pad_id).to(device)
    logprobs, _ = forward(pad.input_ids, pad.attention_mask, pad.loss_mask)
    return logprobs.sum() * 0.0


def _optimized(model, config: SFTConfig | DPOConfig, size: int) -> Optimized:
    """AdamW over ``model``'s trainable parameters, its warmup schedule over the whole run."""
    optimizer = make_optimizer(model.parameters(), lr=config.lr)
    total_steps = config.epochs * math.ceil(size / config.batch_size)
    scheduler = make_scheduler(optimizer, warmup_steps=config.warmup_steps, total_steps=total_steps)
    return Optimized(optimizer_params(optimizer), optimizer, scheduler)


@dataclass
class _Replica:
    """The policy forward of this rank and how its micro-batches take turns with the others'."""

    forward: torch.nn.Module
    strategy: Strategy
    dist: DistContext
    pad_id: int
    device: torch.device


def _micro_losses(
    objective: Objective, replica: _Replica, batch: list[int], normaliser: int, details: list[Any]
) -> Iterator[torch.Tensor]:
    """Each micro-batch loss of this rank's share of ``batch`` (padded to as many micro-batches
    as the busiest rank runs), its backward taken while the generator waits; ``details``
    collects what the objective's step metrics need."""
    dist = replica.dist
    share = batch[dist.rank :: dist.world_size]
    buckets: list[list[int] | None] = list(objective.micro_batches(share)) if share else []
    buckets += [None] * dist.lockstep_padding(len(buckets))
    for index, members in enumerate(buckets):
        # The gradients sync once, in the step's last backward.
        with contextlib.nullcontext() if index == len(buckets) - 1 else replica.strategy.accumulating(replica.forward):
            if members is None:
                yield padding_loss(replica.forward, replica.pad_id, replica.device)
                continue
            loss, detail = objective.micro_loss(replica.forward, members, normaliser)
            details.append(detail)
            yield loss
    replica.strategy.synchronize(replica.forward)  # role adapters on several ranks: averaged here


def train_supervised(
    model,
    size: int,
    objective: Objective,
    config: SFTConfig | DPOConfig,
    *,
    pad_id: int,
    on_step: Callable[[dict], None] | None = None,
    max_nonfinite_steps: int = 3,
    dist: DistContext | None = None,
) -> SupervisedRun:
    """Train ``model`` in place on ``size`` items for ``config.epochs`` epochs of shuffled
    ``config.batch_size`` batches, one optimizer step per batch (AdamW with
    ``config.warmup_steps`` of warmup, gradients clipped to ``config.max_grad_norm``). A step
    with a non-finite loss or gradient norm is skipped; ``max_nonfinite_steps`` in a row raise
    :class:`~agentic_rl.training.optim.NonFiniteError`.

    ``dist``: data-parallel ranks (DDP for the duration of the call) each train on every
    world-size-th item of each batch, normalised by the whole batch, so the update is the
    one-process update on the same batch; every rank ends with the same weights."""
    dist = dist or DistContext()
    groups = [_optimized(model, config, size)]
    guard = NonFiniteGuard(max_nonfinite_steps, hint=objective.nonfinite_hint)
    # Several ranks: a DDP replica (gradients all-reduced once per step); one process: the model as it is.
    strategy = make_strategy("ddp", dist)
    forward = strategy.wrap(PolicyLogprobs(model), layers=list(split_model(model)[0].layers))
    replica = _Replica(forward, strategy, dist, pad_id, next(model.parameters()).device)
    run = SupervisedRun()
    model.train()
    try:
        for epoch, batch in shuffled_batches(size, config.batch_size, config.epochs, config.seed):
            normaliser = objective.normaliser(batch)
            if normaliser == 0:
                continue
            details: list[Any] = []
            outcome = accumulate_and_step(
                _micro_losses(objective, replica, batch, normaliser, details),
                groups,
                max_grad_norm=config.max_grad_norm,
                guard=guard,
                grad_scale=strategy.grad_scale,
                reduce=dist.all_reduce,
            )
            own = objective.step_metrics(batch, normaliser, details, dist)
            if outcome.skipped:
                run.skipped_nonfinite += 1
                continue
            run.metrics.append(step_record(objective.metric_names, len(run.metrics) + 1, epoch, outcome, own))
            if on_step:
                on_step(dict(run.metrics[-1]))
    finally:
        model.eval()
    return run

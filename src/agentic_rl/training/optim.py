"""AdamW with linear warmup and a constant or cosine schedule, and the one optimizer step
(gradient accumulation, clipping, non-finite guard) that SFT, DPO and RL share."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch


def make_optimizer(
    parameters, *, lr: float, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999)
) -> torch.optim.AdamW:
    params = [p for p in parameters if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters")
    # The fused kernel (one pass per parameter) is ~5x the foreach path on CPU (53 vs 249 ms
    # per step for 135M parameters here); foreach covers devices fused does not.
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in params)
    return torch.optim.AdamW(
        params, lr=lr, weight_decay=weight_decay, betas=betas, **({"fused": True} if fused else {"foreach": True})
    )


def make_scheduler(
    optimizer, *, warmup_steps: int, total_steps: int, schedule: str = "constant"
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``warmup_steps`` optimizer steps, then constant or cosine to 10%."""
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule: expected 'constant' or 'cosine', got {schedule!r}")

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant" or total_steps <= warmup_steps:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def restart_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR, lr: float) -> None:
    """After loading a checkpoint into ``scheduler`` (and its optimizer): peak ``lr`` and the
    scheduler's own factor at the loaded step, so a resumed run follows its current
    optim.lr, warmup, schedule and length (the loaded state holds the old run's values;
    unchanged ones give the same learning rate bit for bit)."""
    scheduler.base_lrs = [lr for _ in scheduler.base_lrs]
    rates = [lr * factor(scheduler.last_epoch) for factor in scheduler.lr_lambdas]
    for group, rate in zip(scheduler.optimizer.param_groups, rates):
        group["initial_lr"], group["lr"] = lr, rate
    scheduler._last_lr = rates


class NonFiniteError(RuntimeError):
    """Too many non-finite losses or gradient norms in a row: the run cannot go on."""


class NonFiniteGuard:
    """Counts optimizer steps skipped in a row for a non-finite loss or gradient norm and
    raises :class:`NonFiniteError` at ``limit``; ``hint`` ends the error's message."""

    def __init__(self, limit: int, hint: str) -> None:
        self.limit = limit
        self.hint = hint
        self.in_a_row = 0

    def skip(self, grad_norm: float) -> None:
        self.in_a_row += 1
        if self.in_a_row >= self.limit:
            raise NonFiniteError(
                f"{self.in_a_row} non-finite losses or gradient norms in a row (last grad norm {grad_norm}); {self.hint}"
            )


@dataclass
class Optimized:
    """Parameters stepped by one optimizer (and its lr schedule, if any), clipped by their
    global gradient norm as one group."""

    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None


@dataclass
class StepOutcome:
    loss: float
    """Sum of the micro-batch losses (the mini-batch loss)."""
    grad_norm: float
    """The first group's norm before clipping; NaN when another group's norm is not finite."""
    norms: list[float]
    """Every group's norm before clipping, in order."""
    lr: float
    """The first group's learning rate for this step (before its scheduler advances)."""
    skipped: bool
    """Non-finite loss or norm: the gradients were dropped and no weight changed."""


def optimizer_params(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    """The parameters ``optimizer`` steps, in order."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def _total_norm(params: list[torch.nn.Parameter], max_grad_norm: float) -> float:
    """Clip ``params``' gradients to ``max_grad_norm`` together; their norm before clipping
    (sharded gradients: torch computes the global norm; it comes back as a DTensor)."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def accumulate_and_step(
    micro_losses: Iterable[torch.Tensor],
    groups: Sequence[Optimized],
    *,
    max_grad_norm: float,
    guard: NonFiniteGuard,
    grad_scale: float = 1.0,
    reduce: Callable[[list[float]], list[float]] | None = None,
) -> StepOutcome:
    """One optimizer step over gradients accumulated from ``micro_losses``.

    Each micro-batch loss must already be normalised by the whole mini-batch (global token
    or sequence counts), so the losses add up exactly to the mini-batch loss and their
    gradients to its gradient. Each group is clipped to ``max_grad_norm`` on its own; the
    first group is the policy (its norm and lr are reported). A NaN/inf loss or norm never
    reaches the weights: the gradients are dropped and ``guard`` counts the skip (and
    raises after too many in a row); a finite step resets it.

    Data-parallel ranks: ``grad_scale`` multiplies each loss before its backward (the world
    size, so the strategy's gradient average is the sum of the ranks' losses) and
    ``reduce`` sums the loss over ranks, so every rank reports the mini-batch loss and takes
    the same skip decision.
    """
    for group in groups:
        group.optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for loss in micro_losses:
        (loss * grad_scale if grad_scale != 1.0 else loss).backward()
        loss_sum += float(loss.detach())
    if reduce is not None:
        loss_sum = reduce([loss_sum])[0]
    norms = [_total_norm(group.params, max_grad_norm) for group in groups]
    grad_norm = norms[0] if all(math.isfinite(norm) for norm in norms[1:]) else float("nan")
    lr = (
        groups[0].scheduler.get_last_lr()[0]
        if groups[0].scheduler is not None
        else groups[0].optimizer.param_groups[0]["lr"]
    )
    skipped = not (math.isfinite(grad_norm) and math.isfinite(loss_sum))
    if skipped:
        for group in groups:
            group.optimizer.zero_grad(set_to_none=True)
        guard.skip(grad_norm)
    else:
        guard.in_a_row = 0
        for group in groups:
            group.optimizer.step()
            if group.scheduler is not None:
                group.scheduler.step()
        for group in groups:
            group.optimizer.zero_grad(set_to_none=True)  # frees the gradients' memory until the next step
    return StepOutcome(loss_sum, grad_norm, norms, lr, skipped)

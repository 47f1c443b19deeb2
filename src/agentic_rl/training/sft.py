"""Supervised fine-tuning on multi-turn tool-use conversations.

Conversations are tokenized with ``render_example`` (the rollout engine's token layout)
and the loss is the mean negative log-likelihood of the assistant tokens only.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from agentic_rl.anatomy import split_model
from agentic_rl.chat import ChatRenderer
from agentic_rl.config import SFTConfig
from agentic_rl.data.conversations import render_example, validate_example
from agentic_rl.distributed import DistContext, make_strategy
from agentic_rl.parsers import ToolCallParser, get_parser
from agentic_rl.training.batch import collate, length_buckets, padding_batch
from agentic_rl.training.logprobs import PolicyLogprobs
from agentic_rl.training.optim import (
    NonFiniteGuard,
    Optimized,
    accumulate_and_step,
    make_optimizer,
    make_scheduler,
    optimizer_params,
)


@dataclass
class SFTResult:
    steps: int
    examples: int
    """Examples trained on (after dropping the too-long ones)."""
    dropped_too_long: int
    losses: list[float] = field(default_factory=list)
    """Loss of each optimizer step (before its update)."""
    tokens: int = 0
    """Assistant (loss) tokens trained on, summed over all steps."""
    wall_time_s: float = 0.0
    skipped_nonfinite: int = 0
    """Steps dropped for a non-finite loss or gradient norm (no weight changed)."""


def tokenize_examples(
    examples: list[dict], tokenizer, parser: ToolCallParser | str, max_length: int
) -> tuple[list[tuple[list[int], list[int]]], int]:
    """(token ids, loss mask) per example that fits ``max_length``, and how many did not."""
    parser = get_parser(parser) if isinstance(parser, str) else parser
    renderer = ChatRenderer(tokenizer)
    sequences, dropped = [], 0
    for index, example in enumerate(examples):
        validate_example(example, index)  # one clear line before any compute
        ids, mask = render_example(example["messages"], renderer, parser, tools=example.get("tools"))
        if len(ids) > max_length:
            dropped += 1
        else:
            sequences.append((ids, mask))
    return sequences, dropped


def train_sft(
    model,
    tokenizer,
    examples: list[dict],
    config: SFTConfig,
    *,
    parser: ToolCallParser | str = "hermes",
    on_step: Callable[[dict], None] | None = None,
    max_nonfinite_steps: int = 3,
    dist: DistContext | None = None,
) -> SFTResult:
    """Train ``model`` in place on ``examples`` (``{"messages": [...]}``), on its own device.
    A step with a non-finite loss or gradient norm is skipped; ``max_nonfinite_steps`` in
    a row raise :class:`~agentic_rl.training.optim.NonFiniteError`.

    ``dist``: data-parallel ranks (DDP for the duration of the call) each train on every
    world-size-th example of each batch, normalised by the whole batch's tokens, so the
    update is the one-process update on the same batch; every rank ends with the same weights."""
    started = time.monotonic()
    sequences, dropped = tokenize_examples(examples, tokenizer, parser, config.max_length)
    if not sequences:
        raise ValueError(
            f"max_length: all {dropped} of the {len(examples)} SFT conversations are longer than {config.max_length} tokens; raise it"
        )
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    steps_per_epoch = math.ceil(len(sequences) / config.batch_size)
    optimizer = make_optimizer(model.parameters(), lr=config.lr)
    scheduler = make_scheduler(optimizer, warmup_steps=config.warmup_steps, total_steps=config.epochs * steps_per_epoch)
    step = [Optimized(optimizer_params(optimizer), optimizer, scheduler)]
    guard = NonFiniteGuard(max_nonfinite_steps, hint="lower sft.lr or check the data")
    rng = random.Random(config.seed)
    result = SFTResult(steps=0, examples=len(sequences), dropped_too_long=dropped)
    dist = dist or DistContext()
    # Several ranks: a DDP replica (gradients all-reduced once per step); one process: the model as it is.
    strategy = make_strategy("ddp", dist)
    policy = strategy.wrap(PolicyLogprobs(model), layers=list(split_model(model)[0].layers))

    def micro_losses(batch: list[tuple[list[int], list[int]]], batch_tokens: int) -> Iterator[torch.Tensor]:
        share = batch[dist.rank :: dist.world_size]
        buckets: list[list[int] | None] = (
            list(
                length_buckets(
                    [len(ids) for ids, _ in share], config.micro_batch_tokens, max_sequences=config.batch_size
                )
            )
            if share
            else []
        )
        buckets += [None] * dist.lockstep_padding(len(buckets))
        for index, bucket in enumerate(buckets):
            micro = (
                padding_batch(pad_id)
                if bucket is None
                else collate([share[i][0] for i in bucket], [share[i][1] for i in bucket], pad_token_id=pad_id)
            )
            micro = micro.to(device)
            with contextlib.nullcontext() if index == len(buckets) - 1 else strategy.accumulating(policy):
                logprobs, _ = policy(micro.input_ids, micro.attention_mask, micro.loss_mask)
                # Dividing by the whole batch's token count makes accumulation (and the ranks' sum) exact.
                loss = -(logprobs * micro.loss_mask).sum() / batch_tokens
                yield loss * 0.0 if bucket is None else loss

    model.train()
    try:
        for epoch in range(config.epochs):
            order = list(range(len(sequences)))
            rng.shuffle(order)
            for start in range(0, len(order), config.batch_size):
                batch = [sequences[i] for i in order[start : start + config.batch_size]]
                # Position 0 is never predicted, so it never counts as a loss token.
                batch_tokens = sum(sum(mask[1:]) for _, mask in batch)
                if batch_tokens == 0:
                    continue
                outcome = accumulate_and_step(
                    micro_losses(batch, batch_tokens),
                    step,
                    max_grad_norm=config.max_grad_norm,
                    guard=guard,
                    grad_scale=strategy.grad_scale,
                    reduce=dist.all_reduce,
                )
                if outcome.skipped:
                    result.skipped_nonfinite += 1
                    continue
                result.steps += 1
                result.losses.append(outcome.loss)
                result.tokens += batch_tokens
                if on_step:
                    on_step(
                        {
                            "step": result.steps,
                            "epoch": epoch,
                            "loss": outcome.loss,
                            "lr": outcome.lr,
                            "grad_norm": outcome.grad_norm,
                            "tokens": batch_tokens,
                        }
                    )
    finally:
        model.eval()
    result.wall_time_s = time.monotonic() - started
    return result

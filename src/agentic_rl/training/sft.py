"""Supervised fine-tuning on multi-turn tool-use conversations.

Conversations are tokenized with ``render_example`` (the rollout engine's token layout)
and the loss is the mean negative log-likelihood of the assistant tokens only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import SFTConfig
from agentic_rl.data.conversations import render_example, validate_example
from agentic_rl.distributed import DistContext
from agentic_rl.models.precision import compute_precision
from agentic_rl.parsers import ToolCallParser, get_parser
from agentic_rl.training.batch import collate, length_buckets, micro_batch_overhead
from agentic_rl.training.supervised import Forward, train_supervised

Tokenized = tuple[list[int], list[int]]  # (token ids, loss mask)


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
) -> tuple[list[Tokenized], int]:
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


@dataclass
class SFTObjective:
    """SFT's part of the supervised loop: the summed negative log-likelihood of the loss
    (assistant) tokens of ``sequences``, divided by the batch's loss tokens."""

    sequences: list[Tokenized]
    pad_id: int
    device: torch.device
    micro_batch_tokens: int
    max_sequences: int
    """Rows per micro-batch at most (the batch size)."""
    overhead_tokens: int
    """One more micro-batch's fixed cost in padded tokens (batch.micro_batch_overhead)."""
    metric_names = ("step", "epoch", "loss", "lr", "grad_norm", "tokens")
    nonfinite_hint = "lower sft.lr or check the data"

    def normaliser(self, batch: list[int]) -> int:
        """The batch's loss tokens (position 0 is never predicted, so it never counts)."""
        return sum(sum(self.sequences[i][1][1:]) for i in batch)

    def micro_batches(self, share: list[int]) -> list[list[int]]:
        lengths = [len(self.sequences[i][0]) for i in share]
        buckets = length_buckets(
            lengths, self.micro_batch_tokens, max_sequences=self.max_sequences, overhead_tokens=self.overhead_tokens
        )
        return [[share[j] for j in bucket] for bucket in buckets]

    def micro_loss(self, forward: Forward, members: list[int], normaliser: int) -> tuple[torch.Tensor, None]:
        rows = [self.sequences[i] for i in members]
        micro = collate([ids for ids, _ in rows], [mask for _, mask in rows], pad_token_id=self.pad_id)
        micro = micro.to(self.device)
        logprobs, _ = forward(micro.input_ids, micro.attention_mask, micro.loss_mask)
        return -(logprobs * micro.loss_mask).sum() / normaliser, None

    def step_metrics(self, batch: list[int], normaliser: int, details: list, dist: DistContext) -> dict:
        return {"tokens": normaliser}


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
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    overhead = micro_batch_overhead(compute_precision(model))
    objective = SFTObjective(sequences, pad_id, device, config.micro_batch_tokens, config.batch_size, overhead)
    run = train_supervised(
        model,
        len(sequences),
        objective,
        config,
        pad_id=pad_id,
        on_step=on_step,
        max_nonfinite_steps=max_nonfinite_steps,
        dist=dist,
    )
    return SFTResult(
        steps=len(run.metrics),
        examples=len(sequences),
        dropped_too_long=dropped,
        losses=run.values("loss"),
        tokens=sum(run.values("tokens")),
        wall_time_s=time.monotonic() - started,
        skipped_nonfinite=run.skipped_nonfinite,
    )

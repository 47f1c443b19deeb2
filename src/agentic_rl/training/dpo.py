"""Offline DPO on preference pairs of multi-turn conversations.

A pair is ``{"prompt": [...], "chosen": [...], "rejected": [...], "metadata": {...}}``
with OpenAI-format messages (structured ``tool_calls``, raw ``tool`` results, as the SFT
data): the shared opening messages, then each response's assistant and tool messages.
Each side is tokenized with ``render_example`` (the rollout engine's token layout), so
the loss covers the assistant tokens only. The reference policy is the initial policy:
its sequence log-probs are computed once before the first update (the same numbers a
frozen copy would give, without holding a second model; with LoRA the initial policy is
the base model, as the adapters start at zero).

Pairs come from rollout groups: the best against the worst reward of a group, ties
skipped (:func:`pairs_from_groups`), sampled here (:func:`collect_pairs`) or read back
from a run's ``rollouts.jsonl`` (:func:`pairs_from_rollout_records`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from agentic_rl.algorithms.dpo import dpo_loss, sequence_logprobs
from agentic_rl.chat import ChatRenderer
from agentic_rl.config import DPOConfig, RolloutConfig
from agentic_rl.data.conversations import render_example, trajectory_to_example, validate_example
from agentic_rl.distributed import DistContext
from agentic_rl.envs.base import Env
from agentic_rl.parsers import ToolCallParser, get_parser
from agentic_rl.rollout.engine import rollout
from agentic_rl.rollout.roles import gather_task_groups
from agentic_rl.training.batch import collate, length_buckets
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.supervised import Forward, train_supervised
from agentic_rl.types import Trajectory, TrajectoryGroup

Sequences = tuple[list[int], list[int]]  # (token ids, loss mask)


@dataclass
class DPOResult:
    steps: int
    pairs: int
    """Pairs trained on (after dropping the too-long ones)."""
    dropped_too_long: int
    losses: list[float] = field(default_factory=list)
    """Loss of each optimizer step (before its update)."""
    margins: list[float] = field(default_factory=list)
    """Mean implicit-reward margin (chosen - rejected) of each step's pairs, before its update."""
    accuracies: list[float] = field(default_factory=list)
    """Fraction of each step's pairs whose chosen response has the larger implicit reward."""
    wall_time_s: float = 0.0
    skipped_nonfinite: int = 0
    """Steps dropped for a non-finite loss or gradient norm (no weight changed)."""


# --- pairs ------------------------------------------------------------------------


def _split(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """(opening messages, response messages from the first assistant turn on)."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return messages[:first], messages[first:]


def validate_pair(pair, index: int | None = None) -> None:
    """Raise ``ValueError`` with one line naming the pair and field that is wrong."""
    where = "pair" if index is None else f"pair {index}"
    if not isinstance(pair, dict):
        raise ValueError(f"{where}: expected an object with prompt, chosen, rejected")
    for key in ("prompt", "chosen", "rejected"):
        if not isinstance(pair.get(key), list) or not pair[key]:
            raise ValueError(f"{where}.{key}: expected a non-empty list of messages")
    if any(m.get("role") == "assistant" for m in pair["prompt"] if isinstance(m, dict)):
        raise ValueError(f"{where}.prompt: the shared prompt must end before the first assistant turn")
    for key in ("chosen", "rejected"):
        try:
            validate_example({"messages": pair["prompt"] + pair[key], "tools": pair.get("tools")})
        except ValueError as error:
            raise ValueError(f"{where}.{key}: {str(error).removeprefix('example: ')}") from None
        if pair[key][0].get("role") != "assistant":
            raise ValueError(f"{where}.{key}: must start with an assistant message")


def pairs_from_groups(
    groups: Sequence[TrajectoryGroup], parser: ToolCallParser | str, *, skip_messages: int = 0
) -> list[dict]:
    """One pair per group: its highest-reward trajectory (chosen) against its lowest
    (rejected); groups whose usable rewards are all equal give none. Infrastructure
    failures never enter a pair."""
    pairs = []
    for group in groups:
        usable = [
            t
            for t in group.trajectories
            if t.infra_error is None and any(m.get("role") == "assistant" for m in t.messages)
        ]
        if len(usable) < 2:
            continue
        best = max(usable, key=lambda t: t.reward)  # first of equals: deterministic
        worst = min(usable, key=lambda t: t.reward)
        if best.reward == worst.reward:
            continue
        chosen = trajectory_to_example(best, parser, skip_messages=skip_messages)
        rejected = trajectory_to_example(worst, parser, skip_messages=skip_messages)
        prompt, chosen_messages = _split(chosen["messages"])
        rejected_prompt, rejected_messages = _split(rejected["messages"])
        if prompt != rejected_prompt or chosen.get("tools") != rejected.get(
            "tools"
        ):  # same task, so the same opening; never pair different prompts
            continue
        pairs.append(
            {
                "prompt": prompt,
                "chosen": chosen_messages,
                "rejected": rejected_messages,
                **({"tools": chosen["tools"]} if chosen.get("tools") else {}),
                "metadata": {"task_id": group.task_id, "chosen_reward": best.reward, "rejected_reward": worst.reward},
            }
        )
    return pairs


def pairs_from_rollout_records(records: Sequence[dict], parser: ToolCallParser | str) -> list[dict]:
    """Pairs from ``rollouts.jsonl`` lines (``Trajectory.to_dict()`` plus ``step``), grouped by
    (step, group_id)."""
    groups: dict[tuple, TrajectoryGroup] = {}
    for number, record in enumerate(records, 1):
        if not isinstance(record.get("messages"), list) or "reward" not in record:
            raise ValueError(f"rollout record {number}: expected 'messages' and 'reward' (a rollouts.jsonl line)")
        key = (record.get("step"), record.get("group_id"))
        group = groups.setdefault(
            key, TrajectoryGroup(task_id=str(record.get("task_id", "")), group_id=str(record.get("group_id", "")))
        )
        group.trajectories.append(
            Trajectory(
                task_id=group.task_id,
                group_id=group.group_id,
                messages=record["messages"],
                reward=float(record["reward"]),
                infra_error=record.get("infra_error"),
                info={
                    **(
                        {"tools": record["tools"], "tools_prompt": "template"} if record.get("tools") else {}
                    ),  # described by the chat template
                    **(
                        {"tool_output_template": record["tool_output_template"]}
                        if record.get("tool_output_template")
                        else {}
                    ),  # which framed the results
                },
            )
        )
    return pairs_from_groups(list(groups.values()), parser)


@dataclass
class PairCollection:
    pairs: list[dict]
    groups: int
    """Groups sampled (tasks)."""
    tied: int
    """Groups skipped because all their rewards were equal."""
    wall_time_s: float


def collect_pairs(
    backend,
    make_env: Callable[[], Env],
    task_indices: Sequence[int],
    *,
    samples_per_task: int,
    parser: ToolCallParser | str,
    rollout_config: RolloutConfig | None = None,
    seed: int | None = None,
    on_finish: Callable[[Trajectory], None] | None = None,
    dist: DistContext | None = None,
) -> PairCollection:
    """Sample a group per task with the current policy and pair best against worst.
    ``dist``: data-parallel ranks each sample every world-size-th task (the samples one
    process would draw for it) and all get every pair, in task order."""
    started = time.monotonic()
    dist = dist or DistContext()
    mine = list(range(dist.rank, len(task_indices), dist.world_size))
    groups = rollout(
        backend,
        make_env,
        [task_indices[i] for i in mine],
        group_size=samples_per_task,
        config=rollout_config,
        seed=seed,
        on_finish=on_finish,
        task_positions=mine if dist.distributed else None,
    )
    if dist.distributed:
        groups = gather_task_groups(dist, mine, groups, len(task_indices))
    pairs = pairs_from_groups(groups, parser)
    return PairCollection(pairs, len(groups), len(groups) - len(pairs), time.monotonic() - started)


# --- training ---------------------------------------------------------------------


def tokenize_pairs(
    pairs: Sequence[dict], tokenizer, parser: ToolCallParser | str, max_length: int
) -> tuple[list[tuple[Sequences, Sequences]], int]:
    """(chosen, rejected) token ids and loss masks per pair that fits ``max_length``, and how many did not."""
    parser = get_parser(parser) if isinstance(parser, str) else parser
    renderer = ChatRenderer(tokenizer)
    out, dropped = [], 0
    for index, pair in enumerate(pairs):
        validate_pair(pair, index)  # one clear line before any compute
        chosen = render_example(pair["prompt"] + pair["chosen"], renderer, parser, tools=pair.get("tools"))
        rejected = render_example(pair["prompt"] + pair["rejected"], renderer, parser, tools=pair.get("tools"))
        if max(len(chosen[0]), len(rejected[0])) > max_length:
            dropped += 1
        else:
            out.append((chosen, rejected))
    return out, dropped


def _micro_batches(pairs: list[tuple[Sequences, Sequences]], members: list[int], max_tokens: int) -> list[list[int]]:
    """Micro-batches of whole pairs (both sides of a pair in the same forward pass)."""
    lengths = [max(len(pairs[i][0][0]), len(pairs[i][1][0])) for i in members]
    return [[members[j] for j in bucket] for bucket in length_buckets(lengths, max(max_tokens // 2, 1), len(members))]


def _pair_logprobs(
    model, pairs, members: list[int], pad_id: int, device, *, average: bool, forward=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """[n] chosen and [n] rejected sequence log-probs of the pairs ``members``, one forward pass
    (``forward``: the policy's log-prob forward as a strategy wraps it; default ``model``'s)."""
    rows = [pairs[i][0] for i in members] + [pairs[i][1] for i in members]
    batch = collate([ids for ids, _ in rows], [mask for _, mask in rows], pad_token_id=pad_id).to(device)
    if forward is not None:
        logprobs, _ = forward(batch.input_ids, batch.attention_mask, batch.loss_mask)
    else:
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, select=batch.loss_mask)
    sequences = sequence_logprobs(logprobs, batch.loss_mask, average=average)
    return sequences[: len(members)], sequences[len(members) :]


def reference_logprobs(model, pairs, config: DPOConfig, pad_id: int) -> torch.Tensor:
    """[N, 2] (chosen, rejected) sequence log-probs of every pair under ``model`` as it is now."""
    device = next(model.parameters()).device
    out = torch.zeros((len(pairs), 2))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for members in _micro_batches(pairs, list(range(len(pairs))), config.micro_batch_tokens):
                chosen, rejected = _pair_logprobs(
                    model, pairs, members, pad_id, device, average=config.loss_type == "ipo"
                )
                out[members, 0], out[members, 1] = chosen.float().cpu(), rejected.float().cpu()
    finally:
        model.train(was_training)
    return out


@dataclass
class DPOObjective:
    """DPO's part of the supervised loop: the DPO (or IPO) loss of whole pairs against the
    ``reference`` sequence log-probs ([N, 2], chosen and rejected), each micro-batch's mean
    weighted by its share of the batch's pairs."""

    model: torch.nn.Module
    pairs: list[tuple[Sequences, Sequences]]
    reference: torch.Tensor
    config: DPOConfig
    pad_id: int
    device: torch.device
    metric_names = ("step", "epoch", "loss", "margin", "accuracy", "lr", "grad_norm", "pairs")
    nonfinite_hint = "lower the DPO lr or check the pairs"

    def normaliser(self, batch: list[int]) -> int:
        return len(batch)

    def micro_batches(self, share: list[int]) -> list[list[int]]:
        return _micro_batches(self.pairs, share, self.config.micro_batch_tokens)

    def micro_loss(self, forward: Forward, members: list[int], normaliser: int) -> tuple[torch.Tensor, list[float]]:
        """The weighted loss and the pairs' implicit-reward margins (chosen - rejected)."""
        config = self.config
        chosen, rejected = _pair_logprobs(
            self.model,
            self.pairs,
            members,
            self.pad_id,
            self.device,
            average=config.loss_type == "ipo",
            forward=forward,
        )
        out = dpo_loss(
            chosen,
            rejected,
            self.reference[members, 0],
            self.reference[members, 1],
            beta=config.beta,
            label_smoothing=config.label_smoothing,
            loss_type=config.loss_type,
        )
        return out.loss * (len(members) / normaliser), out.margins.tolist()

    def step_metrics(self, batch: list[int], normaliser: int, details: list, dist: DistContext) -> dict:
        """The mean margin and the accuracy (chosen ahead) over every rank's pairs of ``batch``."""
        mine = [margin for margins in details for margin in margins]
        margins = [margin for rank_margins in dist.all_gather_objects(mine) for margin in rank_margins]
        return {
            "margin": sum(margins) / len(margins),
            "accuracy": sum(margin > 0 for margin in margins) / len(batch),
            "pairs": len(batch),
        }


def train_dpo(
    model,
    tokenizer,
    pairs: list[dict],
    config: DPOConfig,
    *,
    parser: ToolCallParser | str = "hermes",
    on_step: Callable[[dict], None] | None = None,
    max_nonfinite_steps: int = 3,
    dist: DistContext | None = None,
) -> DPOResult:
    """Train ``model`` in place on preference ``pairs``, on its own device. A step with a
    non-finite loss or gradient norm is skipped; ``max_nonfinite_steps`` in a row raise
    :class:`~agentic_rl.training.optim.NonFiniteError`.

    ``dist``: data-parallel ranks (DDP for the duration of the call) each train on every
    world-size-th pair of each batch, weighted by the whole batch's size, so the update is
    the one-process update on the same batch; every rank ends with the same weights."""
    started = time.monotonic()
    sequences, dropped = tokenize_pairs(pairs, tokenizer, parser, config.max_length)
    if not sequences:
        raise ValueError(
            f"no DPO pairs to train on ({dropped} of {len(pairs)} longer than max_length={config.max_length})"
        )
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    reference = reference_logprobs(model, sequences, config, pad_id).to(device)
    objective = DPOObjective(model, sequences, reference, config, pad_id, device)
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
    return DPOResult(
        steps=len(run.metrics),
        pairs=len(sequences),
        dropped_too_long=dropped,
        losses=run.values("loss"),
        margins=run.values("margin"),
        accuracies=run.values("accuracy"),
        wall_time_s=time.monotonic() - started,
        skipped_nonfinite=run.skipped_nonfinite,
    )

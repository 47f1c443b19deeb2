"""A learned value function for PPO: a value head on the policy's backbone (shared) or
on a separate copy of the initial model (separate).

V(s_t), the value before token t is emitted, is read from the last hidden state at
position t - 1, the same state that predicts token t: values line up with
``token_logprobs`` position by position.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from agentic_rl.anatomy import hidden_states, split_model
from agentic_rl.models.precision import compute_autocast
from agentic_rl.training.optim import make_optimizer


class ValueHead(nn.Module):
    """hidden [..., H] -> value [...]; zero-initialised so the first values are 0 (GAE then
    starts as Monte Carlo returns instead of noise)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


def _targets(select: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of the selected positions, position 0 excluded, in ``token_logprobs``' order."""
    target = select.bool().clone()
    target[:, 0] = False
    return target.nonzero(as_tuple=True)


def _scatter(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return torch.zeros(shape, dtype=values.dtype, device=values.device).index_put((rows, cols), values)


def _values(
    backbone, head: ValueHead, input_ids: torch.Tensor, attention_mask: torch.Tensor, select: torch.Tensor, model
) -> torch.Tensor:
    rows, cols = _targets(select)
    with compute_autocast(model):
        hidden, offset = hidden_states(backbone, input_ids, attention_mask, select.bool())
    # The head reads float32 hidden states (ValueHead upcasts): values stay float32.
    return _scatter(head(hidden[rows, cols - 1 - offset]), rows, cols, input_ids.shape)


class ValueModel(nn.Module):
    """A separate critic's whole forward (its backbone and the value head) as one module:
    the root a trainer strategy wraps (FSDP2 shards it like the policy)."""

    def __init__(self, model, head: ValueHead) -> None:
        super().__init__()
        self.model = model
        self.head = head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        return _values(split_model(self.model)[0], self.head, input_ids, attention_mask, select, self.model)


class Critic:
    """The value function and its optimizer. ``mode`` is "shared" (a head on the policy
    backbone: the value loss also trains the backbone through the policy's optimizer) or
    "separate" (a copy of the initial policy with its own head, trained only by the
    value loss)."""

    def __init__(self, policy, mode: str, *, lr: float) -> None:
        if mode not in ("shared", "separate"):
            raise ValueError(f"critic must be 'shared' or 'separate', got {mode!r}")
        self.mode = mode
        self.policy = policy
        device = next(policy.parameters()).device
        modules = {"head": ValueHead(policy.config.hidden_size).to(device)}
        if mode == "separate":
            model = copy.deepcopy(policy)
            for parameter in model.parameters():
                parameter.requires_grad_(True)
            modules["model"] = model
        self.module = nn.ModuleDict(modules)
        """Everything the critic owns (checkpointed); with ``shared`` just the head."""
        self.forward_module: nn.Module | None = (
            ValueModel(modules["model"], modules["head"]) if mode == "separate" else None
        )
        """A separate critic's forward, as the trainer strategy runs it (see ``shard``)."""
        self.sharded = False
        """Whether the critic's weights are sharded over ranks (a separate critic under FSDP2)."""
        self.lr = lr
        self.optimizer = make_optimizer(self.parameters(), lr=lr, weight_decay=0.0)

    def shard(self, strategy) -> None:
        """Spread a separate critic over the ranks as ``strategy`` spreads the policy (FSDP2:
        sharded per decoder layer; its optimizer is rebuilt over the shards). A shared
        critic's head and a DDP replica stay whole: the trainer averages their gradients."""
        if self.mode != "separate" or not strategy.sharded:
            return
        self.forward_module = strategy.wrap(
            self.forward_module, layers=list(split_model(self.module["model"])[0].layers)
        )
        self.sharded = True
        self.optimizer = make_optimizer(self.parameters(), lr=self.lr, weight_decay=0.0)

    @property
    def head(self) -> ValueHead:
        return self.module["head"]

    def parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def train(self, mode: bool = True) -> None:
        self.module.train(mode)

    def values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        """V at the selected positions -> [B, T] (0 elsewhere and at position 0); inputs [B, T].

        Runs the critic's backbone (the policy's, when shared); gradients flow when enabled.
        """
        if self.forward_module is not None:
            return self.forward_module(input_ids, attention_mask, select)
        return _values(split_model(self.policy)[0], self.head, input_ids, attention_mask, select, self.policy)

    @contextmanager
    def values_from_policy_forward(self, select: torch.Tensor) -> Iterator[dict[str, torch.Tensor]]:
        """Shared critic only: while the block computes ``token_logprobs`` for ``select``
        [B, T], capture the hidden states its vocabulary projection receives (exactly the
        selected positions, in order) and put V [B, T] into the yielded dict's "values" on
        exit. One backbone pass serves both the policy and the value loss."""
        if self.mode != "shared":
            raise RuntimeError("values_from_policy_forward needs a shared critic")
        _, lm_head = split_model(self.policy)
        captured: list[torch.Tensor] = []
        handle = lm_head.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
        out: dict[str, torch.Tensor] = {}
        try:
            yield out
        finally:
            handle.remove()
        if len(captured) != 1:
            raise RuntimeError(f"expected one vocabulary projection in the policy forward, saw {len(captured)}")
        rows, cols = _targets(select)
        out["values"] = _scatter(self.head(captured[0]), rows, cols, select.shape)

"""Trainer strategies: how the policy's trainable forward is spread over the ranks.

- ``single``: one process; the module as it is.
- ``ddp``: torch's DistributedDataParallel: a full replica per rank, gradients all-reduced.
- ``fsdp2``: torch's ``fully_shard`` per decoder layer and on the root: parameters,
  gradients and optimizer state sharded over the ranks (float32 masters; with
  bf16-mixed, FSDP's mixed-precision policy gathers bf16 parameters and reduces float32
  gradients), optional CPU offload.

A strategy wraps a *root* module whose forward is the whole trainable computation (the
trainer's log-prob pass), so the wrappers' hooks see every forward. Gradients are averaged
over ranks by both wrappers; the trainer scales each rank's loss by the world size so the
average equals the sum of the ranks' losses (the global batch's loss, whose normalisers are
global counts). Every rank must run the same number of forwards and backwards per
optimizer step (the collectives live in them): the trainer pads its micro-batch plans.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
from torch import nn

from agentic_rl.distributed.context import DistContext

STRATEGIES = ("single", "ddp", "fsdp2")


class Strategy:
    """``single``: nothing to wrap, nothing to gather."""

    name = "single"
    sharded = False
    """Whether each rank holds only shards of the weights and optimizer state."""

    def __init__(self, dist: DistContext) -> None:
        self.dist = dist

    def wrap(self, root: nn.Module, layers: list[nn.Module]) -> nn.Module:
        """The module the trainer calls for its trainable forwards (``layers``: the decoder
        layers, FSDP's sharding units). Build the optimizer after this (FSDP replaces the
        parameters)."""
        return root

    @contextlib.contextmanager
    def accumulating(self, module: nn.Module) -> Iterator[None]:
        """Within the block, backward passes only accumulate gradients locally (all but the
        last micro-batch of an optimizer step)."""
        yield

    def full_weights(self, model: nn.Module) -> nn.Module | dict[str, torch.Tensor]:
        """What an engine with its own copy of the weights syncs from: the model itself, or
        (sharded strategies) its full parameters gathered on every rank, by name."""
        return model

    def synchronize(self, module: nn.Module) -> None:
        """After a step's last backward: make ``module``'s gradients the ranks' average where
        the wrapper did not (nothing here: one process, or a wrapper that syncs in backward)."""

    def average_gradients(self, params: list[nn.Parameter]) -> None:
        """Average the gradients of replicated ``params`` that no wrapper syncs (e.g. a
        critic beside the policy) over the ranks, as DDP does: one flat all-reduce (a
        parameter without a gradient counts as zeros, so every rank sends the same shape)."""
        if not self.dist.distributed or not params:
            return
        import torch.distributed as torch_dist

        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        torch_dist.all_reduce(flat)
        flat /= self.dist.world_size
        for p, synced in zip(params, flat.split([p.numel() for p in params]), strict=True):
            p.grad.copy_(synced.view_as(p.grad))

    @property
    def grad_scale(self) -> float:
        """The factor on each rank's loss that makes the wrapper's gradient average the sum."""
        return float(self.dist.world_size)


class DDPStrategy(Strategy):
    name = "ddp"
    local_sync = False
    """Gradients accumulate locally and are averaged once after the step's last backward
    (:meth:`synchronize`) instead of by DDP's reducer: for a model with several LoRA
    adapters (``lora.roles``), whose ranks' micro-batches train different adapters, so
    each backward leaves other parameters unused (DDP expects every rank to use the same
    ones in its synced backward)."""

    def wrap(self, root: nn.Module, layers: list[nn.Module]) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        if any(len(getattr(module, "peft_config", None) or {}) > 1 for module in root.modules()):
            self.local_sync = True
            return root
        device = next(root.parameters()).device
        # No buffer sync in the forward: rotary tables are constant, and a broadcast in every
        # forward would make gradient-free forwards (old log-probs) collective too. PyTorch
        # 2.13 renamed the switch (broadcast_buffers is deprecated there); 2.12 and older
        # (the GPU images we met run 2.11) know only the old name.
        params = inspect.signature(DistributedDataParallel.__init__).parameters
        no_sync = {"forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers": False}
        return DistributedDataParallel(root, device_ids=[device.index] if device.type == "cuda" else None, **no_sync)

    @contextlib.contextmanager
    def accumulating(self, module: nn.Module) -> Iterator[None]:
        with contextlib.nullcontext() if self.local_sync else module.no_sync():
            yield

    def synchronize(self, module: nn.Module) -> None:
        """Average the gradients of the parameters some rank used; one no rank used keeps no
        gradient, as in one process (AdamW leaves it and its moments alone: an adapter whose
        role made no sample this step)."""
        if not self.local_sync:
            return
        import torch.distributed as torch_dist

        params = [p for p in module.parameters() if p.requires_grad]
        used = torch.tensor([float(p.grad is not None) for p in params], device=params[0].device)
        torch_dist.all_reduce(used)
        self.average_gradients([p for p, count in zip(params, used.tolist(), strict=True) if count > 0])


class FSDP2Strategy(Strategy):
    name = "fsdp2"
    sharded = True

    def __init__(self, dist: DistContext, *, precision: str = "fp32", cpu_offload: bool = False) -> None:
        super().__init__(dist)
        self.precision = precision
        self.cpu_offload = cpu_offload

    def wrap(self, root: nn.Module, layers: list[nn.Module]) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        device = next(root.parameters()).device
        # The mesh is explicit: with a gloo group fully_shard has been seen moving CPU models to CUDA.
        mesh = init_device_mesh(device.type, (self.dist.world_size,))
        options = {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.precision == "bf16-mixed"
            else MixedPrecisionPolicy(),
            "offload_policy": CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy(),
        }
        for layer in layers:
            fully_shard(layer, **options)
        return fully_shard(root, **options)

    @contextlib.contextmanager
    def accumulating(self, module: nn.Module) -> Iterator[None]:
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)

    def full_weights(self, model: nn.Module) -> dict[str, torch.Tensor]:
        from torch.distributed.tensor import DTensor

        # A collective per parameter, in the same order on every rank.
        return {name: p.full_tensor() if isinstance(p, DTensor) else p for name, p in model.named_parameters()}


def make_strategy(name: str, dist: DistContext, *, precision: str = "fp32", cpu_offload: bool = False) -> Strategy:
    """The strategy ``name`` (single, ddp, fsdp2) over ``dist``'s ranks."""
    if name not in STRATEGIES:
        raise ValueError(f"trainer.strategy: expected one of {', '.join(STRATEGIES)}, got {name!r}")
    if not dist.distributed:  # one process is the degenerate case of every strategy (e.g. resuming a DDP run alone)
        return Strategy(dist)
    if name == "single":
        raise ValueError(
            f"trainer.strategy: 'single' runs one process, but {dist.world_size} ranks were started; use ddp or fsdp2"
        )
    if name == "ddp":
        return DDPStrategy(dist)
    return FSDP2Strategy(dist, precision=precision, cpu_offload=cpu_offload)

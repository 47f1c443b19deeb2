"""The trainer's spread over processes (``trainer`` section of a training config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentic_rl.config.base import Section


class TrainerConfig(Section):
    """How the trainer spreads over processes (``agentic-rl train --nproc N`` starts them under torchrun)."""

    strategy: Literal["auto", "single", "ddp", "fsdp2"] = "auto"
    """single: one process; ddp: a full replica per rank, gradients all-reduced; fsdp2: parameters, gradients and optimizer state sharded per decoder layer (torch fully_shard); auto = single for one process, ddp for several."""
    cpu_offload: bool = False
    """fsdp2: keep the sharded parameters and optimizer state in CPU memory (GPU runs short of memory)."""
    timeout_s: float = Field(600.0, gt=0)
    """Collectives wait at most this long: a rank that died or hangs ends the others with an error instead of a hang."""


def check_world_size(config, world_size: int) -> None:
    """What a training config (``TrainConfig``) cannot run on ``world_size`` processes yet:
    a ValueError, one line naming the setting."""
    if world_size <= 1:
        return
    if config.trainer.strategy == "single":
        raise ValueError(f"trainer.strategy: 'single' runs one process; with {world_size} processes use ddp or fsdp2 (or auto)")
    if config.backend.kind in ("vllm", "sglang"):
        raise ValueError(f"backend.kind: {config.backend.kind} runs with one trainer process for now (drop --nproc or use backend.kind hf)")

"""The trainer's spread over processes (``trainer`` section of a training config) and the
rollout side's over a Ray cluster (``distributed`` section)."""

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


class DistributedConfig(Section):
    """Where rollouts run: in the trainer's process (local), or on Ray rollout workers that own
    envs, tool sandboxes and an engine, fed the trainer's weights after every step (ray)."""

    engine: Literal["local", "ray"] = "local"
    """local: rollouts in the trainer process; ray: on rollout worker actors of a Ray cluster (pip install 'agentic-rl[ray]')."""
    ray_address: str | None = None
    """The Ray cluster to join (e.g. 10.0.0.1:6379, or auto); default: the RAY_ADDRESS variable, else a local one-machine cluster."""
    rollout_workers: int = Field(1, ge=1)
    """Rollout worker actors; each owns an engine (a copy of the policy) and its envs."""
    worker_cpus: float = Field(1.0, gt=0)
    """CPUs Ray reserves per rollout worker (fractions allowed: 0.5 puts two on a core); also its torch threads (at least 1)."""
    worker_gpus: float = Field(0.0, ge=0)
    """GPUs Ray reserves per rollout worker (its engine runs on them)."""
    worker_resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each rollout worker needs, to place workers on chosen nodes (e.g. {"rollout": 1} with `ray start --resources '{"rollout": 4}'` on the rollout nodes)."""
    trainer_cpus: float = Field(1.0, gt=0)
    """With --nproc N: CPUs Ray reserves per trainer rank (the trainer group: N actors in one placement group)."""
    trainer_gpus: float = Field(0.0, ge=0)
    """With --nproc N: GPUs Ray reserves per trainer rank (1 for nccl training, one GPU each)."""
    max_staleness: int | None = Field(None, ge=0)
    """Async mode: rollouts for the next steps run while the trainer updates, sampled by weights at most this many steps old (older groups are dropped and counted); unset = sync mode (every step samples from the newest weights)."""


def check_world_size(config, world_size: int) -> None:
    """What a training config (``TrainConfig``) cannot run on ``world_size`` processes yet:
    a ValueError, one line naming the setting."""
    if world_size <= 1:
        return
    if config.trainer.strategy == "single":
        raise ValueError(
            f"trainer.strategy: 'single' runs one process; with {world_size} processes use ddp or fsdp2 (or auto)"
        )
    if config.backend.kind == "sglang":
        raise ValueError("backend.kind: sglang runs with one trainer process for now (drop --nproc, or use vllm or hf)")
    if config.backend.kind == "vllm" and config.lora.enabled:
        raise ValueError(
            "lora.enabled: LoRA with backend.kind vllm runs with one trainer process for now (drop --nproc, or use backend.kind hf)"
        )

"""The process group of a run: which rank this process is, how many there are, its device,
and the few collectives the trainer needs (all on torch.distributed; gloo on CPU, nccl on GPU).

One process is the degenerate case: ``DistContext()`` has rank 0 of 1 and every collective
returns its input, so single-process code paths need no branches.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 600.0
"""Collectives time out after this long (a rank that died or hangs ends the others)."""


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run directory and talks to the user."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def device(self, requested: torch.device) -> torch.device:
        """The device of this rank: with several ranks on GPUs, one GPU per local rank."""
        if self.distributed and requested.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return requested

    def all_gather_objects(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order."""
        if not self.distributed:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def gather_by_position(self, positions: list[int], items: list[Any], total: int) -> list[Any]:
        """Every rank's ``items`` (item i belongs at ``positions[i]``) as one list of ``total``."""
        ordered: list[Any] = [None] * total
        for rank_positions, rank_items in self.all_gather_objects((positions, items)):
            for position, item in zip(rank_positions, rank_items, strict=True):
                ordered[position] = item
        return ordered

    def broadcast_object(self, value: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``value`` on every rank."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        """Element-wise sum (or max) of ``values`` over ranks, as float64."""
        if not self.distributed or not values:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor.tolist()

    def lockstep_padding(self, count: int) -> int:
        """How many padding micro-batches this rank adds to its ``count`` so that every rank
        runs as many as the busiest (the wrappers' collectives live in each forward/backward)."""
        if not self.distributed:
            return 0
        return int(self.all_reduce([float(count)], op="max")[0]) - count

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def _collective_device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")


def init_distributed(timeout_s: float = DEFAULT_TIMEOUT_S) -> DistContext:
    """Join the process group torchrun describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
    ``MASTER_ADDR``/``PORT``), once; a plain process is rank 0 of 1. nccl when this rank
    has a GPU, gloo otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        use_cuda = torch.cuda.is_available()
        if use_cuda:
            torch.cuda.set_device(local_rank)
        timeout = datetime.timedelta(seconds=timeout_s)
        rank = int(os.environ["RANK"])
        dist.init_process_group(
            "nccl" if use_cuda else "gloo",
            store=_attempt_store(rank, world_size, timeout),
            rank=rank,
            world_size=world_size,
            timeout=timeout,
        )
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank)


def _attempt_store(rank: int, world_size: int, timeout: datetime.timedelta) -> dist.Store:
    """The rendezvous store, its keys prefixed by torch elastic's restart count: after a
    restart (``--max-restarts``) the ranks would otherwise read each other's addresses of
    the previous attempt from torchrun's store and fail to connect (measured: about one
    restart in two with gloo)."""
    agent_hosts_it = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size,
        is_master=rank == 0 and not agent_hosts_it,
        timeout=timeout,
        wait_for_workers=False,
    )
    return dist.PrefixStore(f"agentic-rl/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def shutdown() -> None:
    """Leave the process group (at the end of a run)."""
    if dist.is_initialized():
        dist.destroy_process_group()

"""The managed vLLM server's side of the collective weight sync, run inside each vLLM worker.

``WeightReceiver`` is added with vLLM's ``--worker-extension-cls`` (0.32 makes it a base of
the worker class, ``vllm/v1/worker/worker_base.py``), so ``/collective_rpc`` can call its
methods on every worker: join a process group with the trainer (rank 0), then receive the
weights it broadcasts, bucket by bucket, straight into ``reload_weights``.

Why one ``reload_weights`` call for all buckets: it starts a layerwise reload, loads, and
then finalizes every layer (vllm/model_executor/model_loader/reload): a layer that got only
part of its weights (a bucket ending between q and k of a fused qkv projection) would be
processed with the rest missing, and one that got none is put back with a warning. So the
iterator it is given (``BucketStream``) receives the buckets as the model reads: bucket k+1
arrives while bucket k loads, and the server holds those two (and a layer's earlier part
that waits for the rest), never two full copies.

The group is its own ``TCPStore`` plus a ``ProcessGroupGloo`` (CPU) or ``ProcessGroupNCCL``
(GPU) built directly, without ``init_process_group``: the workers' default group (vLLM's
own) is untouched. The trainer side (engines/weight_sync.py) imports the layout and group
helpers from here, so both sides agree byte for byte.

This file is copied next to the server (engines/vllm_server.py) and imported there by the
vLLM interpreter as a top-level module: it imports only the standard library and torch.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

ALIGN = 64
"""Byte alignment of each tensor in a bucket's flat buffer (any dtype may view it)."""
STORE_PREFIX = "agentic-rl-weights"

TensorSpec = Sequence[Any]
"""``(name, dtype name, shape)``: one tensor of a bucket (JSON-friendly)."""


def bucket_layout(bucket: Sequence[TensorSpec]) -> tuple[list[int], int]:
    """Each tensor's byte offset in the bucket's flat buffer, and the buffer's size."""
    offsets, size = [], 0
    for _, dtype, shape in bucket:
        size = -(-size // ALIGN) * ALIGN
        offsets.append(size)
        size += math.prod(shape) * getattr(torch, dtype).itemsize
    return offsets, size


def views(flat: torch.Tensor, bucket: Sequence[TensorSpec]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for each tensor of ``bucket``: views into the uint8 buffer ``flat``."""
    offsets, _ = bucket_layout(bucket)
    for (name, dtype, shape), offset in zip(bucket, offsets, strict=True):
        dtype = getattr(torch, dtype)
        size = math.prod(shape) * dtype.itemsize
        yield name, flat[offset : offset + size].view(dtype).view(tuple(shape))


def connect_store(host: str, port: int, timeout_s: float, *, serve: bool) -> dist.TCPStore:
    """The weight group's rendezvous: served by rank 0 (the trainer; port 0 picks a free
    one, read back from ``store.port``), joined by the workers."""
    return dist.TCPStore(host, port, None, serve, timedelta(seconds=timeout_s), wait_for_workers=False)


def open_group(store: dist.Store, host: str, rank: int, world_size: int, backend: str, timeout_s: float) -> Any:
    """The weight group's process group over ``store``: blocks until every rank has joined
    (or ``timeout_s`` passed), which is also the limit on each broadcast."""
    timeout = timedelta(seconds=timeout_s)
    prefixed = dist.PrefixStore(STORE_PREFIX, store)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(prefixed, rank, world_size, options)
    if backend != "gloo":
        raise ValueError(f"weight group backend: expected gloo or nccl, got {backend!r}")
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timeout
    # Same host for now (a managed server): every rank talks over the store's address.
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    return dist.ProcessGroupGloo(prefixed, rank, world_size, options)


def gpu_id(device: torch.device) -> str:
    """The physical GPU behind ``device`` ("" for a CPU): NCCL cannot put two ranks on one GPU."""
    if device.type != "cuda":
        return ""
    try:
        return str(torch.cuda.get_device_properties(device).uuid)
    except (AttributeError, RuntimeError):
        return ""


def broadcast(group: Any, flat: torch.Tensor) -> Any:
    """Start broadcasting ``flat`` from rank 0 over ``group``; returns the work to wait on."""
    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = 0, 0
    return group.broadcast([flat], options)


class WeightReceiver:
    """vLLM worker extension (see the module docstring). Method names carry a prefix: vLLM
    refuses an extension whose attributes the worker class already has."""

    def agentic_rl_weight_rank(self) -> dict[str, Any]:
        """This worker's rank in the weight group (the trainer is 0), its device type and GPU."""
        parallel = self.vllm_config.parallel_config
        index = getattr(parallel, "data_parallel_index", 0) or 0
        rank = 1 + index * parallel.world_size + self.rank
        return {"rank": rank, "device": self.device.type, "gpu": gpu_id(self.device)}

    def agentic_rl_join_weight_group(self, spec: str) -> int:
        """Join the trainer's group: ``spec`` is JSON with host, port, world_size, backend and
        timeout_s. Returns this worker's rank in it."""
        options = json.loads(spec)
        self.agentic_rl_leave_weight_group()
        rank = self.agentic_rl_weight_rank()["rank"]
        host, timeout_s = options["host"], options["timeout_s"]
        store = connect_store(host, options["port"], timeout_s, serve=False)
        group = open_group(store, host, rank, options["world_size"], options["backend"], timeout_s)
        self._agentic_rl_weights = (store, group, options["backend"])
        return rank

    def agentic_rl_leave_weight_group(self) -> None:
        self._agentic_rl_weights = None

    def agentic_rl_receive_weights(self, spec: str) -> dict[str, Any]:
        """Receive the buckets ``spec`` lists (JSON: ``{"buckets": [[[name, dtype, shape], ...], ...]}``)
        and load them in place. Every bucket is received even if loading fails, so the
        trainer's broadcasts never wait on this worker."""
        state = getattr(self, "_agentic_rl_weights", None)
        if state is None:
            raise RuntimeError("agentic_rl_receive_weights: join the weight group first")
        _, group, backend = state
        started = time.perf_counter()
        stream = BucketStream(group, json.loads(spec)["buckets"], self.device if backend == "nccl" else "cpu")
        iterator, error = iter(stream), None
        try:
            self.reload_weights(weights_iterator=iterator)
        except Exception as exc:  # reported after the rest of the buckets are taken
            error = exc
        iterator.close()
        try:
            stream.drain()
        except Exception:
            if error is None:
                raise  # otherwise the group itself failed: nothing more will come
        if error is not None:
            raise error
        return {
            "buckets": stream.taken,
            "tensors": sum(len(bucket) for bucket in stream.buckets),
            "seconds": round(time.perf_counter() - started, 4),
            "waiting_s": round(stream.waiting_s, 4),
        }


class BucketStream:
    """The buckets of one push in order, as ``(name, tensor)``: the next bucket is already
    on its way while the model loads the current one (two buckets held at most)."""

    def __init__(self, group: Any, buckets: Sequence[Sequence[TensorSpec]], device: Any) -> None:
        self.group, self.buckets, self.device = group, buckets, device
        self.started = self.taken = 0
        self.pending: tuple[torch.Tensor, Any] | None = None
        self.waiting_s = 0.0
        """Seconds spent waiting for broadcasts (the rest is loading)."""

    def _start_next(self) -> None:
        self.pending = None
        if self.started < len(self.buckets):
            flat = torch.empty(bucket_layout(self.buckets[self.started])[1], dtype=torch.uint8, device=self.device)
            self.pending = (flat, broadcast(self.group, flat))
            self.started += 1

    def _take(self) -> torch.Tensor:
        flat, work = self.pending
        waited = time.perf_counter()
        work.wait()
        self.waiting_s += time.perf_counter() - waited
        self.taken += 1
        self._start_next()
        return flat

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        self._start_next()
        for bucket in self.buckets:
            yield from views(self._take(), bucket)

    def drain(self) -> None:
        """Take every bucket not taken yet (after a failed load)."""
        if self.started == 0:
            self._start_next()
        while self.pending is not None:
            self._take()

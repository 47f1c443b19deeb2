"""The trainer's side of the collective weight sync into a managed vLLM server
(``backend.weight_sync``): full weights go from this process (rank 0) to the server's
workers by broadcast, in memory, instead of through a safetensors folder.

- ``connect``: asks the workers (``/collective_rpc``, engines/vllm_receiver.py) for their
  ranks and devices, serves a ``TCPStore`` on loopback and builds the group with them (gloo
  on CPU, NCCL where the server's workers and this process each have a GPU of their own;
  the same code otherwise).
- ``push``: the tensors, converted to the server's dtype, are packed into flat buffers of
  at most ``bucket_bytes`` (a larger tensor gets a bucket of its own) and broadcast one
  bucket at a time (the next one is packed while one goes out, and the server receives the
  next while it loads one), while the ``agentic_rl_receive_weights`` call (which returns
  once the server has loaded them all) runs in a thread. Either side holds at most two
  buckets beside the weights, never a second full copy.
- Everything is bounded by ``timeout_s``; a failure is one :class:`BackendError` line, and
  the group is rebuilt at the next push.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import torch

from agentic_rl.engines.http import BackendError, json_body, one_line
from agentic_rl.engines.vllm_receiver import broadcast, bucket_layout, connect_store, gpu_id, open_group, views
from agentic_rl.errors import ConfigError

DEFAULT_BUCKET_BYTES = 256 << 20
"""Most bytes broadcast at once (one tensor bigger than that goes alone)."""

Rpc = Callable[[str, dict[str, Any] | None, float], list[Any]]
"""``rpc(method, kwargs, timeout_s)``: the server's ``/collective_rpc``; one result per worker."""


def resolve_weight_sync(setting: str, *, managed: bool, lora: bool, available: str | None) -> str:
    """``files`` or ``collective`` for ``backend.weight_sync`` ``setting``. ``managed``: this
    process started the server; ``lora``: adapters are pushed (always files);
    ``available``: None where the server takes broadcasts, else why not. auto picks
    collective wherever it can; collective where it cannot is a one-line ConfigError."""
    if setting not in ("auto", "collective", "files"):
        raise ValueError(f"backend.weight_sync: expected auto, collective or files, got {setting!r}")
    if setting == "files":
        return "files"
    why = (
        "LoRA adapters are pushed through files"
        if lora
        else "it needs a vLLM server this process starts (drop backend.base_url)"
        if not managed
        else available
    )
    if why is None:
        return "collective"
    if setting == "collective":
        raise ConfigError(f"backend.weight_sync: collective is not possible here: {why}; use auto or files")
    return "files"


def group_backend(workers: Sequence[Mapping[str, Any]]) -> str:
    """nccl where this process and every worker have a GPU of their own (NCCL cannot put two
    ranks on one GPU: a server beside the trainer on a single GPU gets gloo), else gloo."""
    if not torch.cuda.is_available() or any(worker["device"] != "cuda" for worker in workers):
        return "gloo"
    own = gpu_id(torch.device("cuda", torch.cuda.current_device()))
    return "gloo" if not own or any(worker.get("gpu") in ("", own) for worker in workers) else "nccl"


def tensor_specs(weights: Mapping[str, torch.Tensor], dtype: torch.dtype) -> list[list[Any]]:
    """``[name, dtype name, shape]`` of each tensor as it is sent (in ``dtype``)."""
    name = str(dtype).removeprefix("torch.")
    return [[key, name, list(value.shape)] for key, value in weights.items()]


def plan_buckets(specs: Sequence[Sequence[Any]], bucket_bytes: int) -> list[list[Any]]:
    """``specs`` split in order into buckets whose flat buffers hold at most ``bucket_bytes``
    (a tensor larger than that is a bucket of its own)."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes: expected a positive size, got {bucket_bytes}")
    buckets: list[list[Any]] = []
    for spec in specs:
        if buckets and bucket_layout([*buckets[-1], spec])[1] <= bucket_bytes:
            buckets[-1].append(spec)
        else:
            buckets.append([spec])
    return buckets


class CollectiveWeightSender:
    """Rank 0 of the weight group with a managed server's workers (see the module docstring).
    ``host``: the address both sides use (loopback: the server runs on this machine)."""

    def __init__(
        self, rpc: Rpc, *, host: str = "127.0.0.1", bucket_bytes: int = DEFAULT_BUCKET_BYTES, timeout_s: float = 600.0
    ) -> None:
        self.rpc = rpc
        self.host = host
        self.bucket_bytes = bucket_bytes
        self.timeout_s = timeout_s
        self.backend: str | None = None
        """gloo or nccl once connected."""
        self._group: Any = None
        self._store: Any = None
        self.last_report: dict[str, Any] = {}
        """The newest push's ``{buckets, results}`` (each worker's seconds, and its share spent waiting for data)."""
        self._abandoned: list[Any] = []
        """Groups (and stores) left with something pending: dropping them would wait for it."""

    @property
    def connected(self) -> bool:
        return self._group is not None

    def probe(self) -> list[dict[str, Any]]:
        """The workers' ``{rank, device}``; BackendError where the server lacks the extension."""
        workers = self.rpc("agentic_rl_weight_rank", None, min(self.timeout_s, 60.0))
        ranks = sorted(int(worker["rank"]) for worker in workers)
        if not workers or ranks != list(range(1, len(workers) + 1)):
            raise BackendError(f"the vLLM workers report weight-group ranks {ranks}; expected 1..{len(workers)}")
        return workers

    def connect(self) -> None:
        """Build the group with the server's workers (blocks until they have joined)."""
        workers = self.probe()
        world_size = 1 + len(workers)
        backend = group_backend(workers)
        store = connect_store(self.host, 0, self.timeout_s, serve=True)
        made: dict[str, Any] = {}

        def build() -> None:  # blocks until the workers join through the RPC below
            try:
                made["group"] = open_group(store, self.host, 0, world_size, backend, self.timeout_s)
            except Exception as error:
                made["error"] = error

        thread = threading.Thread(target=build, name="weight-group", daemon=True)
        thread.start()
        spec = {"host": self.host, "port": store.port, "world_size": world_size, "backend": backend}
        try:
            self.rpc(
                "agentic_rl_join_weight_group",
                {"spec": json.dumps({**spec, "timeout_s": self.timeout_s})},
                self.timeout_s,
            )
        except BackendError:
            self._abandoned.append(store)  # the builder still waits on it until its timeout
            raise
        thread.join(self.timeout_s)
        if "group" not in made:
            self._abandoned.append(store)
            raise BackendError(f"the weight group with the vLLM server did not form: {made.get('error', 'timed out')}")
        self._store, self._group, self.backend = store, made["group"], backend

    def push(self, weights: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, Any]:
        """Broadcast ``weights`` (converted to ``dtype``) into the server, which loads them in
        place; returns what the workers report. BackendError (one line) on any failure."""
        buckets = plan_buckets(tensor_specs(weights, dtype), self.bucket_bytes)
        if not self.connected:
            self.connect()
        device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
        outcome: dict[str, Any] = {}

        def receive() -> None:  # returns once the server has loaded every bucket
            try:
                spec = json.dumps({"buckets": buckets})
                outcome["results"] = self.rpc("agentic_rl_receive_weights", {"spec": spec}, self.timeout_s)
            except Exception as error:
                outcome["error"] = error

        thread = threading.Thread(target=receive, name="weight-receive", daemon=True)
        thread.start()
        deadline = time.monotonic() + self.timeout_s
        try:
            in_flight = None  # (buffer, work): the next bucket is packed while it goes out
            for bucket in buckets:
                flat = torch.empty(bucket_layout(bucket)[1], dtype=torch.uint8, device=device)
                for name, view in views(flat, bucket):
                    view.copy_(weights[name].detach())
                if in_flight is not None:
                    self._wait(in_flight[1], outcome, deadline)
                in_flight = (flat, broadcast(self._group, flat))
            if in_flight is not None:
                self._wait(in_flight[1], outcome, deadline)
            thread.join(max(deadline - time.monotonic(), 0.0))
        except BaseException as error:
            self.close()
            if isinstance(error, RuntimeError) and not isinstance(error, BackendError):  # gloo's or NCCL's
                raise BackendError(f"weight broadcast into the vLLM server failed: {error}") from None
            raise
        if thread.is_alive() or "error" in outcome:
            self.close()
            why = outcome.get("error", f"no answer within {self.timeout_s:g} s")
            raise BackendError(f"the vLLM server did not load the broadcast weights: {why}")
        self.last_report = {"buckets": len(buckets), "results": outcome["results"]}
        return self.last_report

    def _wait(self, work: Any, outcome: dict[str, Any], deadline: float) -> None:
        """Wait for one broadcast; give up when the server's call has already failed (it will
        take nothing more) or the deadline passed, instead of waiting out the group's timeout."""
        pause = 0.0002
        while not work.is_completed():
            if "error" in outcome:
                raise BackendError(f"the vLLM server did not load the broadcast weights: {outcome['error']}")
            if time.monotonic() > deadline:
                raise BackendError(f"the vLLM server took no broadcast within {self.timeout_s:g} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)  # short waits stay short; long ones poll rarely
        work.wait()

    def close(self) -> None:
        """Forget the group (the workers' side is replaced at the next ``connect``)."""
        if self._group is not None:
            self._abandoned.append((self._store, self._group))  # its threads may still wait on a peer
        self._group = self._store = self.backend = None


def http_rpc(client: httpx.Client, base_url: str) -> Rpc:
    """:data:`Rpc` over a vLLM server's ``/collective_rpc`` (the client carries the key); no
    retries: a weight call repeated would wait for broadcasts that are not coming."""
    url = f"{base_url}/collective_rpc"

    def rpc(method: str, kwargs: dict[str, Any] | None, timeout_s: float) -> list[Any]:
        body = {"method": method, "kwargs": kwargs or {}, "timeout": timeout_s}
        try:
            response = client.post(url, json=body, timeout=timeout_s + 30.0)
        except httpx.HTTPError as error:
            raise BackendError(f"POST {url} ({method}) failed: {type(error).__name__}: {error}") from None
        if response.status_code != 200:
            raise BackendError(
                f"POST {url} ({method}) failed with HTTP {response.status_code}: {one_line(response.text)}"
            )
        return list(json_body(response).get("results") or []) if response.content else []

    return rpc

"""The vLLM engine: token-in/token-out over a vLLM server's ``/v1/completions``, with the
trainer's weights pushed into it after every optimizer step.

- Prompts go as token ids and come back as the sampled token ids (``return_token_ids``)
  with their log-probs: trajectories stay token-exact, no re-tokenization.
- Requests run concurrently (engines/remote.py): one request per turn of each episode,
  so an episode waiting on a tool never holds the others; the server batches whatever is
  in flight (and reuses the shared prefix of a multi-turn context through its prefix cache).
- ``sync_weights`` moves the full weights by one of two transports (``backend.weight_sync``):
  collective (a managed server's default): broadcast from this process into the server's
  workers, in memory and in buckets, loaded in place (engines/weight_sync.py,
  engines/vllm_receiver.py); files (a running server's, and the fallback): written as
  safetensors into the served model folder (on tmpfs where there is one) and reloaded by
  the server (``/collective_rpc`` ``reload_weights``). Either way the weights go through
  vLLM's in-place reload (a plain tensor copy would not reach the repacked CPU kernels).
  A restarted server comes back with the newest weights: from the folder, or pushed again
  from the model (or tensors, while the caller still holds them) last broadcast.
  After every push the server's prefix cache is dropped (``/reset_prefix_cache``): its
  blocks hold keys and values computed by the old weights.
- With LoRA (a peft model) the server holds the frozen base and only the adapters are
  pushed: peft's adapter folder, loaded in place through ``/v1/load_lora_adapter``
  (engines/adapters.py); requests then name the adapter. A model with an adapter per role
  (``lora.roles``) has each served under its own name (vLLM's multi-LoRA batching) and
  each request names the one ``select_adapter`` chose when it was built.
- A request that fails for good (the server died, a timeout) ends its episode as an
  infrastructure error; a managed server that died is restarted before the next request.
- Every request carries the server's key (``Authorization: Bearer``): a managed server's
  random one (engines/vllm_server.py), or ``backend.api_key`` / ``$VLLM_API_KEY`` for a
  running one.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import torch

from agentic_rl.engines.adapters import is_lora, lora_rank, vllm_max_lora_rank, write_adapter
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.http import BackendError, json_body, post_json
from agentic_rl.engines.remote import (
    RemoteTokenBackend,
    scratch_folder,
    serve_folder,
    server_dtype,
    weights_by_name,
)
from agentic_rl.engines.vllm_guard import KEY_VARIABLE
from agentic_rl.engines.vllm_server import VLLMServer
from agentic_rl.engines.weight_sync import CollectiveWeightSender, http_rpc, resolve_weight_sync
from agentic_rl.models.lora import SHARED_ADAPTER

LORA_NAME = "policy-lora"
"""The name the pushed (shared) adapter is served under (requests name it once it is loaded);
another adapter of the model is served as ``policy-lora-<adapter>`` (:func:`served_name`)."""


def served_name(adapter: str) -> str:
    """The name the server knows peft adapter ``adapter`` by."""
    return LORA_NAME if adapter == SHARED_ADAPTER else f"{LORA_NAME}-{adapter}"


class VLLMBackend(RemoteTokenBackend):
    """The Backend contract on a vLLM server: ``base_url`` (``http://host:port``, with or
    without ``/v1``) of a running one, or ``server``: a :class:`VLLMServer` this backend
    owns (started already; restarted if it dies, stopped by ``close``; its model folder is
    where weights are pushed). ``api_key``: a running server's key (a managed one's is its own).
    ``weight_sync``: auto, collective or files (``BackendConfig.weight_sync``; read at each push)."""

    name = "vllm"
    generate_path = "/v1/completions"

    def __init__(
        self,
        tokenizer,
        base_url: str | None = None,
        *,
        server: VLLMServer | None = None,
        weights_folder: Path | None = None,
        api_key: str | None = None,
        weight_sync: str = "auto",
        **options: Any,
    ) -> None:
        if (base_url is None) == (server is None):
            raise ValueError("VLLMBackend: give exactly one of base_url (a running server) or server (a managed one)")
        self.server = server
        self.restarts = 0
        self._restart_lock = threading.Lock()
        super().__init__(
            tokenizer,
            server.base_url if server is not None else base_url,
            weights_folder=weights_folder if weights_folder is not None or server is None else server.model_dir,
            **options,
        )
        self.api_key = server.api_key if server is not None else api_key
        """The key every request carries (None: the server asks for none)."""
        if self.api_key:
            self.client.headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            models = self.get_json("/v1/models").get("data") or []
        except BackendError as error:
            if "HTTP 401" not in str(error):
                raise
            raise BackendError(f"{error}: the server needs its key (backend.api_key or ${KEY_VARIABLE})") from None
        if not models:
            raise BackendError(f"{self.base_url}/v1/models lists no served model")
        self.base_model_name = str(models[0]["id"])
        """The served base model."""
        self.adapters: dict[str, Path] = {}
        """Each pushed LoRA adapter's newest folder, by peft adapter name (re-loaded into a restarted server)."""
        self.selected = SHARED_ADAPTER
        """The adapter requests built from now on name (``select_adapter``; a role's policy)."""
        self.adapter_for: Any = None
        """``lora.roles``: a role -> the adapter that samples its turns (the schedulers route by it)."""
        self.weight_sync = weight_sync
        self.last_transport: str | None = None
        """How the newest push went: collective, files or adapter."""
        self.sender = CollectiveWeightSender(http_rpc(self.client, self.base_url), timeout_s=self.timeout_s)
        self._no_broadcast: str | None = (
            None if server is None or server.takes_broadcast else "vllm_args names its own --worker-extension-cls"
        )
        """Why this server takes no broadcast (None: it does, or it was not asked yet)."""
        self._broadcast_source: Any = None
        """What the newest broadcast came from, to push again into a restarted server."""

    @property
    def model_name(self) -> str:
        """The model a request built now names: the selected adapter once it is pushed, else the served base."""
        return served_name(self.selected) if self.selected in self.adapters else self.base_model_name

    def select_adapter(self, name: str) -> None:
        """Requests built from now on are sampled by adapter ``name`` (a role's policy)."""
        self.selected = name

    def request_body(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        stop_token_ids: Sequence[int],
        max_new_tokens: int,
        seed: int,
    ) -> dict[str, Any]:
        """The ``/v1/completions`` request for one prompt (token ids in, token ids out)."""
        if sampling.return_entropy:
            raise ValueError("backend.kind vllm: per-token entropies (ARPO's branching signal) need backend.kind hf")
        return {
            "model": self.model_name,
            "prompt": list(prompt),
            "max_tokens": int(max_new_tokens),
            "temperature": float(sampling.temperature),
            "top_p": float(sampling.top_p),
            "seed": int(seed) & 0x7FFFFFFFFFFFFFFF,
            "logprobs": 0,  # the sampled token's log-prob only
            "return_token_ids": True,
            "stop_token_ids": list(stop_token_ids),
            "skip_special_tokens": False,
        }

    def parse(self, answer: dict[str, Any]) -> tuple[list[int], list[float], str]:
        choice = answer["choices"][0]
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return [int(t) for t in choice["token_ids"]], [float(x) for x in choice["logprobs"]["token_logprobs"]], finish

    supports_streaming = True

    def stream_chunk(self, chunk: dict[str, Any]) -> tuple[list[int], list[float], str | None]:
        if not chunk.get("choices"):  # a usage-only event
            return [], [], None
        choice = chunk["choices"][0]
        ids = [int(t) for t in choice.get("token_ids") or ()]
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or ()]
        reason = choice.get("finish_reason")
        return ids, logprobs, None if reason is None else ("length" if reason == "length" else "stop")

    def reload(self, folder: Path) -> None:
        post_json(
            self.client,
            f"{self.base_url}/collective_rpc",
            {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}},
            max_retries=self.max_retries,
        )

    def push(self, source: Any) -> None:
        """Full weights by the transport ``weight_sync`` resolves to; a LoRA model pushes its adapters only."""
        if is_lora(source):
            self.push_adapter(source)
        elif self.transport() == "collective":
            self.before_request()
            self.broadcast(weights_by_name(source))
            self._broadcast_source = weak_source(source)
        else:
            super().push(source)
            self._broadcast_source, self.last_transport = None, "files"  # the folder holds the newest
        self.reset_prefix_cache()

    def reset_prefix_cache(self, attempts: int = 50) -> None:
        """Drop the server's prefix cache: its blocks hold keys and values the old weights
        computed, which a new request sharing the prefix would otherwise reuse (measured on
        a 1069-token prompt: first-token log-prob -1.47 instead of -1.29 after a push). The
        reset fails while requests hold blocks; none should be in flight during a push."""
        for _ in range(attempts):
            try:
                response = self.client.post(f"{self.base_url}/reset_prefix_cache", timeout=60.0)
            except httpx.HTTPError as error:
                raise BackendError(
                    f"POST {self.base_url}/reset_prefix_cache failed: {type(error).__name__}: {error}"
                ) from None
            if response.status_code == 404:  # no such route (a stand-in server): nothing cached to drop
                return
            if response.status_code != 200:
                raise BackendError(f"POST {self.base_url}/reset_prefix_cache failed with HTTP {response.status_code}")
            if json_body(response).get("success", True):
                return
            time.sleep(0.1)
        raise BackendError(
            f"{self.base_url} kept its prefix cache after the weight push: requests still hold its blocks"
        )

    def transport(self) -> str:
        """collective or files for the next full-weights push (asks the server once whether
        it takes broadcasts; auto falls back to files where it does not)."""
        managed = self.server is not None
        if self.weight_sync != "files" and managed and self._no_broadcast is None and not self.sender.connected:
            self.before_request()
            try:
                self.sender.probe()
            except BackendError as error:
                self._no_broadcast = f"the server does not take weights by broadcast ({error})"
        available = self._no_broadcast if managed else None
        return resolve_weight_sync(self.weight_sync, managed=managed, lora=False, available=available)

    def broadcast(self, weights: dict[str, torch.Tensor]) -> None:
        try:
            self.sender.push(weights, self.weights_dtype)
        except Exception as error:
            if self.server is None:
                raise
            # Its weights may be half loaded (or it still waits for buckets): stopped, the next
            # request restarts it with the newest weights that arrived whole (the folder's, or
            # the last broadcast again).
            self.server.stop()
            if not isinstance(error, BackendError):
                raise
            raise BackendError(f"{error} (server log: {self.server.log_path})") from None
        self.last_transport = "collective"

    def push_adapter(self, source: Any) -> None:
        # A new folder per version: the server reads it while loading, and a restart re-loads the newest.
        # peft writes the shared adapter at the top and every other one in a folder of its name.
        folder = write_adapter(source, self.weights_folder / f"adapter-{self.weight_version + 1}")
        self.before_request()
        for name in adapter_names(source):
            self.load_adapter(folder if name == SHARED_ADAPTER else folder / name, name)
        self.last_transport = "adapter"
        for old in self.weights_folder.glob("adapter-*"):
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def load_adapter(self, folder: Path, name: str = SHARED_ADAPTER) -> None:
        """Load (or replace in place) adapter ``name`` from ``folder``; requests for it name it from now on."""
        body = {"lora_name": served_name(name), "lora_path": str(folder), "load_inplace": True}
        try:
            post_json(self.client, f"{self.base_url}/v1/load_lora_adapter", body, max_retries=self.max_retries)
        except BackendError as error:
            raise BackendError(
                f"lora.enabled: the vLLM server at {self.base_url} did not load the adapter ({error}); a server you start needs "
                "--enable-lora --max-lora-rank N (N >= lora.r), --max-loras M (M >= the adapters: one per own role, "
                "the shared one, one for frozen and one for snapshot roles) and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
            ) from None
        self.adapters[name] = folder

    def before_request(self) -> None:
        """Restart a managed server that died (it serves the newest weights file, and gets the newest adapter back)."""
        if self.server is None or self.server.alive:
            return
        with self._restart_lock:
            if not self.server.alive:
                self.server.restart()
                self.restarts += 1
                self.sender.close()  # its workers are gone
                if self._broadcast_source is not None:  # the folder holds older weights than the server had
                    self.broadcast(resolve_source(self._broadcast_source, self.weight_version))
                for name, folder in list(self.adapters.items()):
                    self.load_adapter(folder, name)

    def close(self) -> None:
        self.sender.close()
        self._broadcast_source = None
        if self.server is not None:
            self.server.stop()
        super().close()


def adapter_names(model: Any) -> list[str]:
    """A peft model's adapters, the shared one first."""
    names = list(getattr(model, "peft_config", {}) or {})
    return sorted(names, key=lambda name: (name != SHARED_ADAPTER, name))


def weak_source(source: Any) -> Any:
    """What a restart pushes again: the model itself (no copy), or weak references to the
    tensors of a mapping (no copy kept alive: gone once the caller drops them)."""
    if isinstance(source, torch.nn.Module):
        return source
    return {name: weakref.ref(tensor) for name, tensor in weights_by_name(source).items()}


def resolve_source(kept: Any, version: int) -> Any:
    if isinstance(kept, torch.nn.Module):
        return weights_by_name(kept)
    weights = {name: ref() for name, ref in kept.items()}
    if any(tensor is None for tensor in weights.values()):
        raise BackendError(
            f"the vLLM server restarted and lost weight version {version}, which was broadcast from tensors no longer "
            "held; set backend.weight_sync files to have a restarted server reload the newest weights from its folder"
        )
    return weights


def build_vllm_backend(
    config, model_name: str, *, loaded=None, follower_of: str | None = None, api_key: str | None = None
) -> VLLMBackend:
    """The vllm backend a ``BackendConfig`` describes: ``config.base_url``'s running server
    (weights pushed through a scratch folder it must be able to read), or a managed server
    started from ``config.python`` on a folder holding ``loaded``'s model (default: the
    model ``model_name`` loaded once on the CPU to write that folder). A LoRA model's server
    holds its base weights and is started to take adapters of its rank. ``follower_of``:
    the URL of a server another trainer rank owns and pushes weights into, ``api_key`` its
    key; this backend only sends requests (distributed/shared_server.py). A running server's
    key is ``config.api_key``, else ``$VLLM_API_KEY``. ``config.weight_sync`` collective where
    it cannot work is a ConfigError before any server starts (or once it answers)."""
    lora = loaded is not None and is_lora(loaded[0])
    if config.weight_sync == "collective" and follower_of is None:
        resolve_weight_sync("collective", managed=not config.base_url, lora=lora, available=None)
    dtype_name = server_dtype(config.dtype)
    dtype = getattr(torch, dtype_name)
    options = {"weights_dtype": dtype, "max_concurrency": config.max_concurrency, "timeout_s": config.request_timeout_s}
    if follower_of is not None:
        from agentic_rl.models import load_tokenizer

        tokenizer = loaded[1] if loaded is not None else load_tokenizer(model_name)
        return VLLMBackend(tokenizer, follower_of, api_key=api_key, **options)
    if config.base_url:
        from agentic_rl.models import load_tokenizer

        options["api_key"] = config.api_key or os.environ.get(KEY_VARIABLE)
        if loaded is None:
            return VLLMBackend(load_tokenizer(model_name), config.base_url, **options)
        folder = scratch_folder()
        return VLLMBackend(loaded[1], config.base_url, weights_folder=folder, owned_folder=folder, **options)
    if loaded is None:
        from agentic_rl.models import load

        loaded = load(model_name, device="cpu")
    folder = scratch_folder()
    serve_folder(*loaded, folder / "model", dtype)
    max_lora_rank = vllm_max_lora_rank(lora_rank(loaded[0])) if lora else None
    max_loras = len(adapter_names(loaded[0])) if lora else None
    server = VLLMServer(
        folder / "model",
        python=config.python,
        dtype=dtype_name,
        extra_args=config.vllm_args,
        startup_timeout_s=config.startup_timeout_s,
        log_path=folder / "server.log",
        max_lora_rank=max_lora_rank,
        max_loras=max_loras,
    )
    try:
        server.start()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    backend = VLLMBackend(loaded[1], server=server, owned_folder=folder, weight_sync=config.weight_sync, **options)
    if config.weight_sync == "collective":
        try:
            backend.transport()  # asks the server now: a one-line error before training starts
        except BaseException:
            backend.close()
            raise
    return backend

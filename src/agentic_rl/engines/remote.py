"""What token-level engines behind an HTTP server share (vLLM, SGLang): concurrent requests
on a thread pool, one per turn of each episode; ``generate`` for the per-turn scheduler and
``session()`` for the continuous one (engines/request_session.py); failures as
infrastructure errors; weights pushed through a safetensors folder the server reloads.

A subclass says how one request looks (``request_body``), how the server's answer maps to
a :class:`Completion` (``parse``), which path it is posted to (``generate_path``) and how
the server reloads a weights folder (``reload``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch

from agentic_rl.engines.adapters import base_weights, is_lora
from agentic_rl.engines.base import Completion, SamplingParams
from agentic_rl.engines.http import RETRY_STATUS, BackendError, json_body, one_line, post_json
from agentic_rl.engines.request_session import RequestSession
from agentic_rl.engines.staged import StagedWeights

WEIGHTS_FILE = "model.safetensors"
SCRATCH_PREFIX = "agentic-rl-engine-"
"""The name prefix of the scratch folders engines create (``scratch_folder``)."""


def scratch_folder() -> Path:
    """A new folder on tmpfs (``/dev/shm``) where there is one: weight syncs then never touch a disk."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=shm if shm.is_dir() else None))


def weights_by_name(source: Any) -> dict[str, torch.Tensor]:
    """Full weights by Hugging Face parameter name from a model (tied weights once) or a
    name -> tensor mapping (what a sharded trainer gathers)."""
    if isinstance(source, Mapping):
        return dict(source)
    if is_lora(source):
        raise ValueError(
            "this server engine takes full weights; LoRA adapters are pushed into vLLM only (backend.kind vllm, or hf)"
        )
    return {name: parameter for name, parameter in source.named_parameters()}


def write_weights(weights: Mapping[str, torch.Tensor], folder: Path, dtype: torch.dtype) -> Path:
    """``weights`` in ``dtype`` as ``folder/model.safetensors``, replaced atomically."""
    from safetensors.torch import save_file

    tmp = folder / f".{WEIGHTS_FILE}.tmp"
    save_file({name: value.detach().to("cpu", dtype).contiguous() for name, value in weights.items()}, str(tmp))
    tmp.replace(folder / WEIGHTS_FILE)
    return folder / WEIGHTS_FILE


def serve_folder(model, tokenizer, folder: Path, dtype: torch.dtype) -> Path:
    """A Hugging Face folder a server can load: ``model``'s config, ``tokenizer`` and its
    current weights in ``dtype`` (weight syncs overwrite the weights file later); a LoRA
    model's base weights (its adapters are pushed apart)."""
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    write_weights(base_weights(model) if is_lora(model) else weights_by_name(model), folder, dtype)
    return folder


def server_dtype(setting: str) -> str:
    """The dtype a server engine runs in for ``backend.dtype`` ``setting``: auto follows
    ``precision: auto`` on this machine's device (bfloat16 where bf16 is fast, else float32)."""
    if setting != "auto":
        return setting
    from agentic_rl.models import resolve_device
    from agentic_rl.models.precision import resolve_precision

    return "bfloat16" if resolve_precision("auto", resolve_device("auto")).precision == "bf16-mixed" else "float32"


class RemoteTokenBackend:
    """The Backend contract (``interface == "tokens"``) over a server's HTTP API.

    ``tokenizer``: the policy's (the rollout engine renders prompts with it);
    ``weights_folder``: where ``sync_weights`` writes the weights the server reloads (it
    must be able to read it); ``weights_dtype``: the dtype written (the server's)."""

    interface = "tokens"
    separate_weights = True
    """The engine samples from its own copy of the weights (bf16 on the server): rollout correction applies."""
    name = "remote"
    generate_path = "/generate"

    def __init__(
        self,
        tokenizer,
        base_url: str,
        *,
        weights_folder: Path | None = None,
        weights_dtype: torch.dtype = torch.bfloat16,
        max_concurrency: int = 64,
        timeout_s: float = 600.0,
        max_retries: int = 1,
        owned_folder: Path | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.owned_folder = owned_folder
        """A scratch folder of this backend's (weights, a served model), removed by ``close``."""
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.weights_folder = Path(weights_folder) if weights_folder is not None else None
        self.weights_dtype = weights_dtype
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.weight_version = 0
        self.last_sync_s = 0.0
        """Seconds the newest ``sync_weights`` took (write + reload)."""
        self.infra_errors = 0
        """Requests that failed for good (their episodes ended as infrastructure errors)."""
        self.client = httpx.Client(
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        self.staged = StagedWeights(self._load_version)
        """Weights another thread handed over (``stage_weights``): a session pushes them into
        the server once its requests in flight have finished (turn boundaries)."""
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix=f"{self.name}-request")

    # ------------------------------------------------------------------ what a subclass defines

    def request_body(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        stop_token_ids: Sequence[int],
        max_new_tokens: int,
        seed: int,
    ) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, answer: dict[str, Any]) -> tuple[list[int], list[float], str]:
        """(sampled token ids, their log-probs, "stop" or "length") from the server's JSON."""
        raise NotImplementedError

    def reload(self, folder: Path) -> None:
        """Have the server load the weights just written to ``folder``."""
        raise NotImplementedError

    supports_streaming = False
    """Whether ``stream_chunk`` reads the server's streamed answers (``"stream": true``)."""

    def stream_chunk(self, chunk: dict[str, Any]) -> tuple[list[int], list[float], str | None]:
        """(new token ids, their log-probs, "stop"/"length" once finished, else None) from
        one server-sent event of a streamed answer."""
        raise NotImplementedError

    def before_request(self) -> None:
        """A hook run before every request (a managed server restarts here if it died)."""

    # ------------------------------------------------------------------ sampling

    def get_json(self, path: str) -> Any:
        """GET ``path``'s JSON; BackendError (naming the server) when it cannot be read."""
        try:
            response = self.client.get(f"{self.base_url}{path}", timeout=30.0)
        except httpx.HTTPError as error:
            raise BackendError(
                f"GET {self.base_url}{path} failed: {type(error).__name__}: {error} (is the {self.name} server running?)"
            ) from error
        if response.status_code != 200:
            raise BackendError(f"GET {self.base_url}{path}: HTTP {response.status_code}")
        return json_body(response)

    def complete(self, body: dict[str, Any]) -> Completion:
        """One request -> its Completion (``error`` set when it failed for good)."""
        version = self.weight_version
        try:
            self.before_request()
            token_ids, logprobs, finish = self.parse(
                json_body(
                    post_json(self.client, f"{self.base_url}{self.generate_path}", body, max_retries=self.max_retries)
                )
            )
        except (BackendError, KeyError, IndexError, TypeError, ValueError) as error:
            self.infra_errors += 1
            return Completion(
                [], [], "stop", weight_version=version, error=f"{self.name}: {type(error).__name__}: {error}"
            )
        if len(token_ids) != len(logprobs):
            self.infra_errors += 1
            return Completion(
                [],
                [],
                "stop",
                weight_version=version,
                error=f"{self.name}: {len(token_ids)} token ids but {len(logprobs)} log-probs",
            )
        return Completion(token_ids, logprobs, finish, weight_version=version)

    def submit(self, body: dict[str, Any]) -> Future:
        """``complete(body)`` on the request pool."""
        return self._pool.submit(self.complete, body)

    def complete_streamed(self, body: dict[str, Any], partial: list[int], cancelled: threading.Event) -> Completion:
        """``complete(body)`` with the answer streamed: ``partial`` grows by the token ids
        as they arrive; once ``cancelled`` is set the stream is closed, which ends the
        request on the server (its slot is freed), and the Completion carries an error.
        A failure before the first token is retried as ``complete`` retries."""
        version = self.weight_version
        url = f"{self.base_url}{self.generate_path}"
        logprobs: list[float] = []
        finish = None
        attempt = 0
        try:
            self.before_request()
            while True:
                try:
                    with self.client.stream("POST", url, json={**body, "stream": True}) as response:
                        if response.status_code != 200:
                            response.read()
                            if response.status_code in RETRY_STATUS and attempt < self.max_retries:
                                raise httpx.TransportError(f"HTTP {response.status_code}")
                            raise BackendError(
                                f"POST {url} failed with HTTP {response.status_code}: {one_line(response.text)}"
                            )
                        for line in response.iter_lines():
                            if cancelled.is_set():
                                raise BackendError("cancelled: the client went away")
                            if not line.startswith("data:"):
                                continue
                            data = line[5:].strip()
                            if data == "[DONE]":
                                break
                            chunk = json.loads(data)
                            if "error" in chunk:
                                raise BackendError(f"POST {url}: the stream failed: {one_line(str(chunk['error']))}")
                            ids, values, reason = self.stream_chunk(chunk)
                            logprobs.extend(values)
                            partial.extend(ids)
                            finish = reason or finish
                    break
                except httpx.TransportError as error:
                    if partial or attempt >= self.max_retries:
                        raise BackendError(
                            f"POST {url} failed after {attempt + 1} attempts: {type(error).__name__}: {error}"
                        ) from error
                    time.sleep(0.5 * 2**attempt)
                    attempt += 1
            if finish is None:
                raise BackendError(f"POST {url}: the stream ended without a finish reason")
        except (BackendError, httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as error:
            if not cancelled.is_set():
                self.infra_errors += 1
            return Completion(
                [], [], "stop", weight_version=version, error=f"{self.name}: {type(error).__name__}: {error}"
            )
        if len(partial) != len(logprobs):
            self.infra_errors += 1
            return Completion(
                [],
                [],
                "stop",
                weight_version=version,
                error=f"{self.name}: {len(partial)} token ids but {len(logprobs)} log-probs",
            )
        return Completion(list(partial), logprobs, finish, weight_version=version)

    def submit_streamed(self, body: dict[str, Any], partial: list[int], cancelled: threading.Event) -> Future:
        """``complete_streamed`` on the request pool."""
        return self._pool.submit(self.complete_streamed, body, partial, cancelled)

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        *,
        stop_token_ids: list[int],
        max_new_tokens: list[int] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, in input order, all requested at once. Row i's seed is
        ``sampling.row_seeds[i]`` if given, else derived from ``(sampling.seed, i)``."""
        limits = max_new_tokens or [sampling.max_new_tokens] * len(prompts)
        seeds = sampling.seeds_for(len(prompts))
        bodies = [
            self.request_body(p, sampling, stop_token_ids=stop_token_ids, max_new_tokens=n, seed=s)
            for p, n, s in zip(prompts, limits, seeds, strict=True)
        ]
        return list(self._pool.map(self.complete, bodies))

    def session(self, sampling: SamplingParams, *, stop_token_ids: Sequence[int]) -> RequestSession:
        """A session for the continuous scheduler: each episode's turns are independent
        requests (engines/request_session.py)."""
        return RequestSession(self, sampling, stop_token_ids)

    # ------------------------------------------------------------------ weights and lifecycle

    def sync_weights(self, source: Any = None) -> int:
        """Push the trainer's weights (a model, or full tensors by name) into the server;
        returns the new weight version. ``source=None`` only counts the update."""
        if source is not None:
            if self.weights_folder is None:
                raise ValueError(
                    f"{type(self).__name__}: weights_folder is needed to push weights into a server this process did not start"
                )
            started = time.monotonic()
            self.push(source)
            self.last_sync_s = time.monotonic() - started
        self.weight_version += 1
        return self.weight_version

    def push(self, source: Any) -> None:
        """Move ``source``'s weights into the server: write them to the weights folder, reload."""
        write_weights(weights_by_name(source), self.weights_folder, self.weights_dtype)
        self.before_request()
        self.reload(self.weights_folder)

    def stage_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Thread-safe: push ``weights`` as ``version`` at the next point where no request is
        in flight (a session holds new requests meanwhile): every turn is sampled by one
        version, and episodes continue with the new weights from their next turn."""
        self.staged.stage(weights, version)

    def apply_staged(self) -> int | None:
        """Push staged weights now (nothing may be in flight); returns their version or None."""
        return self.staged.apply()

    def _load_version(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        self.sync_weights(weights)
        self.weight_version = version

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
        if self.owned_folder is not None:
            shutil.rmtree(self.owned_folder, ignore_errors=True)

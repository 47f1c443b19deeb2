"""The vLLM engine: token-in/token-out over a vLLM server's ``/v1/completions``, with the
trainer's weights pushed into it after every optimizer step.

- Prompts go as token ids and come back as the sampled token ids (``return_token_ids``)
  with their log-probs: trajectories stay token-exact, no re-tokenization.
- Requests run concurrently: ``session()`` gives the continuous scheduler one request
  per turn of each episode, so an episode waiting on a tool never holds the others; the
  server batches whatever is in flight (and reuses the shared prefix of a multi-turn
  context through its prefix cache).
- ``sync_weights`` writes the full weights as safetensors into the served model folder
  (on tmpfs where there is one) and has the server reload them in place
  (``/collective_rpc`` ``reload_weights``; a plain tensor copy would not reach the
  repacked CPU kernels). A restarted server therefore comes back with the newest weights.
- A request that fails for good (the server died, a timeout) ends its episode as an
  infrastructure error; a managed server that died is restarted before the next request.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx
import torch

from agentic_rl.engines.base import Completion, SamplingParams
from agentic_rl.engines.http import BackendError, json_body, post_json
from agentic_rl.engines.vllm_server import VLLMServer
from agentic_rl.seeds import stream_seed

WEIGHTS_FILE = "model.safetensors"
SCRATCH_PREFIX = "agentic-rl-vllm-"


def scratch_folder() -> Path:
    """A new folder on tmpfs (``/dev/shm``) where there is one: weight syncs then never touch a disk."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=shm if shm.is_dir() else None))


def weights_by_name(source: Any) -> dict[str, torch.Tensor]:
    """Full weights by Hugging Face parameter name from a model (tied weights once) or a
    name -> tensor mapping (what a sharded trainer gathers)."""
    if isinstance(source, Mapping):
        return dict(source)
    if hasattr(source, "peft_config"):
        raise ValueError("backend.kind vllm: LoRA models are not supported yet (push merged weights or use backend.kind hf)")
    return {name: parameter for name, parameter in source.named_parameters()}


def write_weights(weights: Mapping[str, torch.Tensor], folder: Path, dtype: torch.dtype) -> Path:
    """``weights`` in ``dtype`` as ``folder/model.safetensors``, replaced atomically."""
    from safetensors.torch import save_file

    tmp = folder / f".{WEIGHTS_FILE}.tmp"
    save_file({name: value.detach().to("cpu", dtype).contiguous() for name, value in weights.items()}, str(tmp))
    tmp.replace(folder / WEIGHTS_FILE)
    return folder / WEIGHTS_FILE


def serve_folder(model, tokenizer, folder: Path, dtype: torch.dtype) -> Path:
    """A Hugging Face folder vLLM can serve: ``model``'s config, ``tokenizer`` and its current
    weights in ``dtype`` (weight syncs overwrite the weights file later)."""
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    write_weights(weights_by_name(model), folder, dtype)
    return folder


class VLLMBackend:
    """The Backend contract (``interface == "tokens"``) on a vLLM server.

    ``tokenizer``: the policy's (the rollout engine renders prompts with it).
    ``base_url``: a running server (``http://host:port``, without ``/v1``); or ``server``:
    a :class:`VLLMServer` this backend owns (started already; restarted if it dies,
    stopped by ``close``). ``weights_folder``: where ``sync_weights`` writes the weights
    the server reloads (the served folder for a managed server; the server must be able
    to read it). ``weights_dtype``: the dtype written (the server's).
    """

    interface = "tokens"
    separate_weights = True
    """The engine samples from its own copy of the weights (bf16 on the server): rollout correction applies."""

    def __init__(
        self,
        tokenizer,
        base_url: str | None = None,
        *,
        server: VLLMServer | None = None,
        weights_folder: Path | None = None,
        weights_dtype: torch.dtype = torch.bfloat16,
        max_concurrency: int = 64,
        timeout_s: float = 600.0,
        max_retries: int = 1,
    ) -> None:
        if (base_url is None) == (server is None):
            raise ValueError("VLLMBackend: give exactly one of base_url (a running server) or server (a managed one)")
        self.tokenizer = tokenizer
        self.server = server
        self.base_url = (server.base_url if server is not None else base_url).rstrip("/").removesuffix("/v1")
        self.weights_folder = Path(weights_folder) if weights_folder is not None else (server.model_dir if server is not None else None)
        self.weights_dtype = weights_dtype
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.weight_version = 0
        self.last_sync_s = 0.0
        """Seconds the newest ``sync_weights`` took (write + reload)."""
        self.infra_errors = 0
        """Requests that failed for good (their episodes ended as infrastructure errors)."""
        self.restarts = 0
        self._client = httpx.Client(timeout=timeout_s, limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency))
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="vllm-request")
        self._restart_lock = threading.Lock()
        self.model_name = self._served_model()

    # ------------------------------------------------------------------ sampling

    def _served_model(self) -> str:
        try:
            response = self._client.get(f"{self.base_url}/v1/models", timeout=30.0)
        except httpx.HTTPError as error:
            raise BackendError(f"GET {self.base_url}/v1/models failed: {type(error).__name__}: {error} (is the vLLM server running?)") from error
        models = json_body(response).get("data") or []
        if response.status_code != 200 or not models:
            raise BackendError(f"GET {self.base_url}/v1/models: HTTP {response.status_code}, no served model")
        return str(models[0]["id"])

    def request_body(self, prompt: Sequence[int], sampling: SamplingParams, *, stop_token_ids: Sequence[int], max_new_tokens: int, seed: int) -> dict[str, Any]:
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

    def complete(self, body: dict[str, Any]) -> Completion:
        """One request -> its Completion (``error`` set when it failed for good)."""
        version = self.weight_version
        try:
            self._ensure_server()
            response = post_json(self._client, f"{self.base_url}/v1/completions", body, max_retries=self.max_retries)
            choice = json_body(response)["choices"][0]
            token_ids = [int(t) for t in choice["token_ids"]]
            logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        except (BackendError, KeyError, IndexError, TypeError) as error:
            self.infra_errors += 1
            return Completion([], [], "stop", weight_version=version, error=f"vllm: {type(error).__name__}: {error}")
        if len(token_ids) != len(logprobs):
            self.infra_errors += 1
            return Completion([], [], "stop", weight_version=version, error=f"vllm: {len(token_ids)} token ids but {len(logprobs)} log-probs")
        return Completion(token_ids, logprobs, "length" if choice.get("finish_reason") == "length" else "stop", weight_version=version)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, *, stop_token_ids: list[int], max_new_tokens: list[int] | None = None) -> list[Completion]:
        """One completion per prompt, in input order, all requested at once. Row i's seed is
        ``sampling.row_seeds[i]`` if given, else derived from ``(sampling.seed, i)``."""
        limits = max_new_tokens or [sampling.max_new_tokens] * len(prompts)
        seeds = sampling.row_seeds
        if seeds is None:
            base = sampling.seed if sampling.seed is not None else int(torch.randint(0, 2**62, ()))
            seeds = [stream_seed(base, i) for i in range(len(prompts))]
        bodies = [self.request_body(p, sampling, stop_token_ids=stop_token_ids, max_new_tokens=n, seed=s) for p, n, s in zip(prompts, limits, seeds, strict=True)]
        return list(self._pool.map(self.complete, bodies))

    def session(self, sampling: SamplingParams, *, stop_token_ids: Sequence[int]) -> RequestSession:
        """A session for the continuous scheduler: each episode's turns are independent requests."""
        return RequestSession(self, sampling, stop_token_ids)

    # ------------------------------------------------------------------ weights and lifecycle

    def sync_weights(self, source: Any = None) -> int:
        """Push the trainer's weights (a model, or full tensors by name) into the server;
        returns the new weight version. ``source=None`` only counts the update (the
        served weights are already current, e.g. right after start)."""
        if source is not None:
            if self.weights_folder is None:
                raise ValueError("VLLMBackend: weights_folder is needed to push weights into a server this process did not start")
            started = time.monotonic()
            write_weights(weights_by_name(source), self.weights_folder, self.weights_dtype)
            self._ensure_server()
            post_json(self._client, f"{self.base_url}/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(self.weights_folder)}}, max_retries=self.max_retries)
            self.last_sync_s = time.monotonic() - started
        self.weight_version += 1
        return self.weight_version

    def _ensure_server(self) -> None:
        """Restart a managed server that died (it serves the newest weights file)."""
        if self.server is None or self.server.alive:
            return
        with self._restart_lock:
            if not self.server.alive:
                self.server.restart()
                self.restarts += 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
        if self.server is not None:
            self.server.stop()
            if self.server.model_dir.parent.name.startswith(SCRATCH_PREFIX):  # a scratch folder of ours (scratch_folder)
                shutil.rmtree(self.server.model_dir.parent, ignore_errors=True)

    def submit(self, body: dict[str, Any]) -> Future:
        """``complete(body)`` on the request pool."""
        return self._pool.submit(self.complete, body)


class RequestSession:
    """The decode-session API (engines/decode_session.py) over concurrent requests: every
    submitted or extended sequence is one request in flight; ``step`` returns the turns
    that finished meanwhile. A sequence's context is its prompt, its sampled turns and the
    observations appended by ``extend``; turn t of a sequence samples from stream
    ``(seed, t)``."""

    POLL_S = 0.01
    """How long ``step`` waits for a request to finish before returning nothing (the
    scheduler then checks on its env steps)."""

    def __init__(self, backend: VLLMBackend, sampling: SamplingParams, stop_token_ids: Sequence[int]) -> None:
        self.backend = backend
        self.sampling = sampling
        self.stop_token_ids = list(stop_token_ids)
        self.contexts: dict[Hashable, list[int]] = {}
        self.seeds: dict[Hashable, int] = {}
        self.turns: dict[Hashable, int] = {}
        self.in_flight: dict[Future, Hashable] = {}

    def __enter__(self) -> RequestSession:
        return self

    def __exit__(self, *exc_info) -> None:
        for future in self.in_flight:
            future.cancel()

    @property
    def busy(self) -> bool:
        return bool(self.in_flight)

    def _launch(self, key: Hashable, max_new_tokens: int) -> None:
        seed = stream_seed(self.seeds[key], self.turns[key])
        body = self.backend.request_body(self.contexts[key], self.sampling, stop_token_ids=self.stop_token_ids, max_new_tokens=max(int(max_new_tokens), 1), seed=seed)
        self.in_flight[self.backend.submit(body)] = key

    def submit(self, key: Hashable, token_ids: Sequence[int], max_new_tokens: int, seed: int) -> None:
        if key in self.contexts:
            raise ValueError(f"sequence {key!r} is already in this session")
        if not token_ids:
            raise ValueError(f"sequence {key!r}: token_ids is empty; a prompt needs at least one token")
        self.contexts[key], self.seeds[key], self.turns[key] = list(token_ids), int(seed), 0
        self._launch(key, max_new_tokens)

    def extend(self, key: Hashable, token_ids: Sequence[int], max_new_tokens: int) -> None:
        if key in self.in_flight.values():
            raise ValueError(f"sequence {key!r} is not paused after a finished turn")
        self.contexts[key].extend(token_ids)
        self._launch(key, max_new_tokens)

    def release(self, key: Hashable) -> None:
        for mapping in (self.contexts, self.seeds, self.turns):
            mapping.pop(key, None)

    def step(self) -> list[tuple[Hashable, Completion]]:
        done, _ = wait(list(self.in_flight), timeout=self.POLL_S, return_when=FIRST_COMPLETED)
        finished = []
        for future in done:
            key = self.in_flight.pop(future)
            completion = future.result()
            self.contexts[key].extend(completion.token_ids)
            self.turns[key] += 1
            finished.append((key, completion))
        return finished


def build_vllm_backend(config, model_name: str, *, loaded=None) -> VLLMBackend:
    """The vllm backend a ``BackendConfig`` describes: ``config.base_url``'s running server
    (weights pushed through a scratch folder it must be able to read), or a managed server
    started from ``config.python`` on a folder holding ``loaded``'s model (default: the
    model ``model_name`` loaded once on the CPU to write that folder)."""
    dtype = getattr(torch, config.dtype)
    options = {"weights_dtype": dtype, "max_concurrency": config.max_concurrency, "timeout_s": config.request_timeout_s}
    if config.base_url:
        from agentic_rl.models import load_tokenizer

        tokenizer = loaded[1] if loaded is not None else load_tokenizer(model_name)
        return VLLMBackend(tokenizer, config.base_url, weights_folder=scratch_folder() if loaded is not None else None, **options)
    if loaded is None:
        from agentic_rl.models import load

        loaded = load(model_name, device="cpu")
    folder = scratch_folder()
    serve_folder(*loaded, folder / "model", dtype)
    server = VLLMServer(folder / "model", python=config.python, dtype=config.dtype, extra_args=config.vllm_args, startup_timeout_s=config.startup_timeout_s, log_path=folder / "server.log")
    try:
        server.start()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return VLLMBackend(loaded[1], server=server, **options)

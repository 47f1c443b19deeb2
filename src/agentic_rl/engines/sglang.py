"""The SGLang engine: token-in/token-out over a running SGLang server's native ``/generate``
(``input_ids`` in; the sampled ids and their log-probs back in
``meta_info.output_token_logprobs``), weights pushed with ``/update_weights_from_disk``.

SGLang has no CPU build, so this client connects to a server you start
(``python -m sglang.launch_server --model-path DIR --port P``) on the machine that runs
the trainer, or one that shares its file system; ``sync_weights`` writes the trainer's
weights into ``weights_folder`` (config, tokenizer and safetensors: a folder SGLang can
load) and asks the server to load it. Requests, sessions and failures work as for vLLM
(engines/remote.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.http import BackendError, json_body, post_json
from agentic_rl.engines.remote import RemoteTokenBackend, scratch_folder, serve_folder, server_dtype


class SGLangBackend(RemoteTokenBackend):
    """The Backend contract on a running SGLang server at ``base_url`` (``http://host:port``)."""

    name = "sglang"
    generate_path = "/generate"

    def __init__(self, tokenizer, base_url: str, **options: Any) -> None:
        super().__init__(tokenizer, base_url, **options)
        self.model_path = str(self.get_json("/get_model_info").get("model_path", ""))
        """What the server loaded at start (reported by ``/get_model_info``)."""

    def request_body(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        stop_token_ids: Sequence[int],
        max_new_tokens: int,
        seed: int,
    ) -> dict[str, Any]:
        """The ``/generate`` request for one prompt (token ids in, token ids out)."""
        if sampling.return_entropy:
            raise ValueError("backend.kind sglang: per-token entropies (ARPO's branching signal) need backend.kind hf")
        return {
            "input_ids": list(prompt),
            "sampling_params": {
                "temperature": float(sampling.temperature),
                "top_p": float(sampling.top_p),
                "max_new_tokens": int(max_new_tokens),
                "stop_token_ids": list(stop_token_ids),
                "skip_special_tokens": False,
                "sampling_seed": int(seed) & 0x7FFFFFFF,
            },
            "return_logprob": True,
            "logprob_start_len": -1,  # the sampled tokens' log-probs only
        }

    def parse(self, answer: dict[str, Any]) -> tuple[list[int], list[float], str]:
        meta = answer["meta_info"]
        finish = (meta.get("finish_reason") or {}).get("type")
        if finish not in ("stop", "length"):  # "abort": the server dropped the request
            raise BackendError(f"the server ended the request with finish_reason {meta.get('finish_reason')!r}")
        entries = meta["output_token_logprobs"]  # [logprob, token id, text] per sampled token
        return [int(entry[1]) for entry in entries], [float(entry[0]) for entry in entries], finish

    def reload(self, folder: Path) -> None:
        answer = json_body(
            post_json(
                self.client,
                f"{self.base_url}/update_weights_from_disk",
                {"model_path": str(folder)},
                max_retries=self.max_retries,
            )
        )
        if not answer.get("success", False):
            raise BackendError(
                f"{self.base_url}/update_weights_from_disk did not load {folder}: {answer.get('message', answer)}"
            )


def build_sglang_backend(config, model_name: str, *, loaded=None) -> SGLangBackend:
    """The sglang backend a ``BackendConfig`` describes (``config.base_url`` is required);
    with ``loaded`` (a trainer's model and tokenizer) weights are pushed through a scratch
    folder holding a loadable copy of that model."""
    import torch

    if not config.base_url:
        from agentic_rl.errors import ConfigError

        raise ConfigError(
            "backend.base_url: required when backend.kind is 'sglang' (a running server, e.g. http://127.0.0.1:30000)"
        )
    dtype = getattr(torch, server_dtype(config.dtype))
    options = {"weights_dtype": dtype, "max_concurrency": config.max_concurrency, "timeout_s": config.request_timeout_s}
    if loaded is None:
        from agentic_rl.models import load_tokenizer

        return SGLangBackend(load_tokenizer(model_name), config.base_url, **options)
    scratch = scratch_folder()
    folder = serve_folder(*loaded, scratch / "model", dtype)
    return SGLangBackend(loaded[1], config.base_url, weights_folder=folder, owned_folder=scratch, **options)

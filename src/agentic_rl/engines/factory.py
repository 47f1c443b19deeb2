"""Build a backend from configuration."""

from __future__ import annotations

from agentic_rl.config import BackendConfig, ConfigError, ModelConfig


def build_backend(
    backend: BackendConfig, model: ModelConfig, *, loaded=None, precision: str = "fp32", own_copy: bool = False
):
    """The backend a config names. ``loaded``: an already loaded ``(model, tokenizer)``
    to share (the trainer passes its own model so rollouts see the newest weights).
    ``precision`` (resolved: fp32 or bf16-mixed): with bf16-mixed the hf engine samples
    from bf16 weights (a copy of ``loaded``'s, refreshed by ``sync_weights``); ``own_copy``:
    a copy of ``loaded``'s weights even in the same dtype (for a sharded trainer)."""
    if backend.kind == "hf":
        import torch

        from agentic_rl.engines.hf import HFBackend
        from agentic_rl.models import load

        weights_dtype = torch.bfloat16 if precision == "bf16-mixed" else None
        if loaded is not None:
            return HFBackend(*loaded, batch_size=backend.batch_size, weights_dtype=weights_dtype, own_copy=own_copy)
        # Nothing to train: load the sampling weights in their dtype, no float32 master.
        policy, tokenizer = load(
            model.name, device=model.device, linear_kernel=model.linear_kernel, dtype=weights_dtype
        )
        return HFBackend(policy, tokenizer, batch_size=backend.batch_size)
    if backend.kind == "vllm":
        from agentic_rl.engines.vllm import build_vllm_backend

        return build_vllm_backend(backend, model.name, loaded=loaded)
    if backend.kind == "sglang":
        from agentic_rl.engines.sglang import build_sglang_backend

        return build_sglang_backend(backend, model.name, loaded=loaded)
    if not backend.base_url:
        raise ConfigError("backend.base_url: required when backend.kind is 'openai' (e.g. http://127.0.0.1:8000/v1)")
    from agentic_rl.engines.openai import OpenAIChatBackend

    return OpenAIChatBackend(
        model.name, backend.base_url, api_key=backend.api_key, max_concurrency=backend.max_concurrency
    )

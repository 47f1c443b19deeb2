"""Build a backend from configuration."""

from __future__ import annotations

from agentic_rl.config import BackendConfig, ConfigError, ModelConfig


def build_backend(backend: BackendConfig, model: ModelConfig, *, loaded=None):
    """The backend a config names. ``loaded``: an already loaded ``(model, tokenizer)``
    to share (the trainer passes its own model so rollouts see the newest weights)."""
    if backend.kind == "hf":
        from agentic_rl.models import load
        from agentic_rl.engines.hf import HFBackend

        policy, tokenizer = loaded or load(model.name, device=model.device, linear_kernel=model.linear_kernel)
        return HFBackend(policy, tokenizer, batch_size=backend.batch_size)
    if not backend.base_url:
        raise ConfigError("backend.base_url: required when backend.kind is 'openai' (e.g. http://127.0.0.1:8000/v1)")
    from agentic_rl.engines.openai import OpenAIChatBackend

    return OpenAIChatBackend(model.name, backend.base_url, api_key=backend.api_key, max_concurrency=backend.max_concurrency)

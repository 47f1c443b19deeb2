"""Resolving model names, loading model + tokenizer, the embedded default and tiny test
model, and a model's anatomy (backbone, head, hidden states: models.anatomy)."""

from agentic_rl.models.anatomy import hidden_states, split_model
from agentic_rl.models.cache import cache_dir
from agentic_rl.models.loading import (
    MODEL_NAMES,
    ModelNotFoundError,
    load,
    load_tokenizer,
    resolve_device,
    source_dtype,
)

__all__ = [
    "MODEL_NAMES",
    "ModelNotFoundError",
    "cache_dir",
    "hidden_states",
    "load",
    "load_tokenizer",
    "resolve_device",
    "source_dtype",
    "split_model",
]

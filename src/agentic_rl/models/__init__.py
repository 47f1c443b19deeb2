"""Resolving model names, loading model + tokenizer, the embedded default and tiny test
model. A model's anatomy (backbone, head, hidden states) lives below, in agentic_rl.anatomy,
with the cache folder (agentic_rl.cache): accel builds on both, and models on accel."""

from agentic_rl.anatomy import hidden_states, split_model
from agentic_rl.cache import cache_dir
from agentic_rl.models.loading import (
    MODEL_NAMES,
    ModelNotFoundError,
    load,
    load_tokenizer,
    resolve_auto_parser,
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
    "resolve_auto_parser",
    "resolve_device",
    "source_dtype",
    "split_model",
]

"""Resolving model names, loading model + tokenizer, the embedded default and tiny test model."""

from agentic_rl.models.loading import MODEL_NAMES, ModelNotFoundError, cache_dir, load, load_tokenizer, resolve_device

__all__ = ["MODEL_NAMES", "ModelNotFoundError", "cache_dir", "load", "load_tokenizer", "resolve_device"]

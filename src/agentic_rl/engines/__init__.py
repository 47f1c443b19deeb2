"""Inference engines behind the Backend contract (``engines/base.py``): ``hf`` (in-process
transformers, continuous batching), ``scripted`` (tests), ``openai`` (remote chat
endpoints). Build one from the config with :func:`build_backend`."""

from agentic_rl.engines.base import Backend, Completion, SamplingParams, SharedWeights, TokenBackend
from agentic_rl.engines.factory import build_backend

__all__ = ["Backend", "Completion", "SamplingParams", "SharedWeights", "TokenBackend", "build_backend"]

"""Backends: ``hf`` (in-process transformers), ``scripted`` (tests), ``openai`` (remote chat endpoints)."""

from agentic_rl.rollout.backends.base import Completion, SamplingParams, TokenBackend

__all__ = ["Completion", "SamplingParams", "TokenBackend"]

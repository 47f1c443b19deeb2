"""Shared fixtures: the tiny random model with the real SmolLM2 tokenizer and chat template."""

from __future__ import annotations

import pytest

from agentic_rl.models import load


@pytest.fixture(scope="session")
def tiny():
    """``(model, tokenizer)`` of the tiny random Llama (real tokenizer, chat template)."""
    return load("tiny-random", device="cpu")


@pytest.fixture(scope="session")
def tokenizer(tiny):
    return tiny[1]

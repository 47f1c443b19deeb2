"""A tiny randomly initialised Llama with the real SmolLM2 tokenizer and chat template.

Built locally from a config (no download) and seeded, so tests exercise real
tokenization and templating at a fraction of the cost of the real model.
"""

from __future__ import annotations

import torch


def tiny_config(vocab_size: int) -> dict:
    """The tiny model's architecture as config.json keys (the memory planner reads it too)."""
    return dict(
        model_type="llama",
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )


def build_tiny_model(vocab_size: int, *, pad_token_id: int, eos_token_id: int, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    architecture = tiny_config(vocab_size)
    del architecture["model_type"]
    config = LlamaConfig(**architecture, pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=None)
    # Seed through a fork of the RNG so building the model does not disturb the caller's stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.config.name_or_path = "tiny-random"
    return model

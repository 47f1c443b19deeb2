"""Optional training speed/memory options: activation checkpointing and torch.compile.

Both are off by default: on this CPU class neither was measured faster for the small
default model (checkpointing recomputes each layer's forward, ~1.3x the compute, and only
saves memory; compile spends minutes compiling and recompiles for each new micro-batch
shape). They exist for long sequences (memory) and GPUs (compile); the numerics tests in
tests/training/test_throughput_paths.py show losses and gradients are unchanged.
"""

from __future__ import annotations


def apply_speed_options(model, *, gradient_checkpointing: bool = False, compile: bool = False):
    """Turn the options on for ``model`` in place (also through a peft wrapper); returns it."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if gradient_checkpointing:
        # Non-reentrant checkpointing works with inputs that do not require grad (frozen
        # embeddings under LoRA) and with the shared-prefix KV cache in agentic_rl/anatomy.py.
        kwargs = {"use_reentrant": False}
        if hasattr(base, "activation_checkpointing_enable"):
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:  # transformers before 5.24 (the name it deprecates since)
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        base.config.use_cache = False
    if compile:
        # Compile the decoder layers, not the whole model: the rollout loop calls the same
        # modules with a custom cache, which stays in eager Python around compiled layers.
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else base.model
        for layer in decoder.layers:
            layer.compile(dynamic=True)
    return model

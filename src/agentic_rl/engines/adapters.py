"""LoRA adapters for server engines: the frozen base weights a server loads once, and the
adapter folders (peft's format) pushed after every optimizer step instead of full weights.

A peft model names its base weights ``base_model.model.<name>`` and, inside each wrapped
layer, ``<layer>.base_layer.weight``; a server loads them under the plain Hugging Face
names. The adapters are the only parameters that train, so a push writes just those
(``adapter_model.safetensors`` + ``adapter_config.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

PEFT_PREFIX = "base_model.model."

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``--max-lora-rank`` values vLLM accepts (``vllm.config.lora.MaxLoRARanks``)."""


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a peft model with adapters (what ``lora.enabled`` trains)."""
    return hasattr(model, "peft_config")


def lora_rank(model: Any) -> int:
    """The largest adapter rank of a peft model."""
    return max(int(config.r) for config in model.peft_config.values())


def base_weights(model: Any) -> dict[str, torch.Tensor]:
    """A peft model's frozen base weights by Hugging Face name (adapters left out, tied
    weights once): what a server serves underneath the adapters."""
    weights = {}
    for name, parameter in model.named_parameters():
        if ".lora_" in name:
            continue
        weights[name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")] = parameter
    return weights


def write_adapter(model: Any, folder: Path) -> Path:
    """``model``'s adapters in peft's folder format (config + safetensors) at ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds adapters of ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"lora.r: vLLM serves adapters up to rank {VLLM_LORA_RANKS[-1]}, got {rank}")

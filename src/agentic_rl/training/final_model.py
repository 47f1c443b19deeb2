"""The final model folder a run leaves behind: final/ as a plain Hugging Face folder.

Kept apart from the resumable checkpoints (training/checkpoint.py): a checkpoint is the
trainer's private, resumable state, while final/ is what a user loads with
``transformers``: LoRA adapters merged, weights in the model's published dtype (or fp32 /
bf16 on request), config.json recording that dtype. The in-memory model is never changed:
the run may go on using it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from agentic_rl.models import source_dtype

FINAL_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def final_dtype(setting: str, model_name: str) -> torch.dtype:
    """The dtype of final/'s weights for ``final_dtype`` ``setting``: fp32, bf16, or
    original (the dtype ``model_name`` was published in)."""
    if setting == "original":
        return source_dtype(model_name)
    if setting not in FINAL_DTYPES:
        raise ValueError(f"final_dtype: expected original, fp32 or bf16, got {setting!r}")
    return FINAL_DTYPES[setting]


def save_final(
    model,
    tokenizer,
    folder: Path,
    *,
    dtype: torch.dtype | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> None:
    """A plain Hugging Face folder that ``transformers`` loads (LoRA adapters merged), its
    weights in ``dtype`` (None: as they are in memory). ``model`` keeps its own dtype: the
    run may go on using it. ``state_dict``: the weights to write instead of ``model``'s own
    (a sharded model's, gathered by the trainer strategy)."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    state = state_dict if state_dict is not None else None
    if dtype is not None:
        state = _state_in(state if state is not None else model.state_dict(), dtype)
    model.save_pretrained(folder, state_dict=state)
    if dtype is not None:
        _set_config_dtype(folder / "config.json", dtype)
    tokenizer.save_pretrained(folder)


def _state_in(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``state`` with floating tensors in ``dtype``: one converted copy per shared storage
    (tied embeddings stay tied, so the writer still stores them once), none where the dtype
    already matches; integer buffers as they are."""
    converted: dict[tuple, torch.Tensor] = {}
    out = {}
    for key, value in state.items():
        if not value.is_floating_point():
            out[key] = value
            continue
        identity = (value.data_ptr(), value.shape, value.stride())
        if identity not in converted:
            converted[identity] = value.to(dtype)
        out[key] = converted[identity]
    return out


def _set_config_dtype(path: Path, dtype: torch.dtype) -> None:
    """Record ``dtype`` in a saved config.json: ``save_pretrained`` writes the in-memory
    parameters' dtype, not that of the state dict it was handed."""
    config = json.loads(path.read_text())
    name = str(dtype).removeprefix("torch.")
    config["dtype"] = name
    if "torch_dtype" in config:  # older transformers read this key
        config["torch_dtype"] = name
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

"""Atomic training checkpoints: weights, the trainer's state (optimizer, scheduler, counters), RNG states.

A checkpoint is written into a temporary folder, marked complete, then renamed into
place, so a crash mid-write never leaves a folder that looks usable. Retention deletes
old checkpoints only after the new one is complete. A checkpoint loads onto the device of
the model it is restored into, whichever device wrote it (CUDA -> CPU and back).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from agentic_rl.models import source_dtype

COMPLETE = "COMPLETE"

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def trainable_state(model) -> dict[str, torch.Tensor]:
    """The weights worth saving, each stored once (safetensors refuses shared storage)."""
    # With LoRA only the adapters change; the frozen base is rebuilt from the model name.
    names = {name for name, p in model.named_parameters() if p.requires_grad}
    state = model.state_dict()
    keep = {k: v for k, v in state.items() if k in names} if len(names) < len(state) else state
    # safetensors refuses tensors that share memory (tied embeddings): store each once.
    seen: dict[int, str] = {}
    out = {}
    for key, value in keep.items():
        pointer = value.data_ptr()
        if pointer in seen:
            continue
        seen[pointer] = key
        out[key] = value.detach().contiguous().cpu()
    return out


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states, plus every CUDA device's when CUDA is in use."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    # Only once initialised: querying the states would otherwise start CUDA in a CPU run.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s states; the CUDA ones only onto as many devices as wrote
    them (a warning otherwise). Checkpoints from before CUDA states were saved have none."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    # The generators take CPU byte tensors only, wherever map_location put the saved ones.
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda")
    if not cuda:
        return
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if devices != len(cuda):
        _warn_once(f"checkpoint: the CUDA RNG states of {len(cuda)} device(s) were not restored (this machine has {devices}); sampling on the GPU will not repeat the original run's")
        return
    torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def save_checkpoint(root: Path, step: int, *, model, trainer_state: dict[str, Any], info: dict[str, Any], keep: int, critic_module=None) -> Path:
    """Write ``root/step-<step>`` atomically and prune to the newest ``keep`` complete ones.

    ``model`` (and ``critic_module``) weights go to safetensors, ``trainer_state`` (the
    trainer's ``state_dict()``: optimizer, scheduler, counters) and the RNG states to
    trainer.pt, ``info`` (JSON: what the run directory needs back, e.g. log line counts and
    finished stages) to state.json."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file(trainable_state(model), tmp / "model.safetensors")
    if critic_module is not None:
        save_file(trainable_state(critic_module), tmp / "critic.safetensors")
    return publish_checkpoint(tmp, final, step=step, trainer_state=trainer_state, info=info, keep=keep, written=[p for p in (tmp / "model.safetensors", tmp / "critic.safetensors") if p.is_file()])


def publish_checkpoint(tmp: Path, final: Path, *, step: int, trainer_state: dict[str, Any], info: dict[str, Any], keep: int, written: list[Path]) -> Path:
    """Finish the checkpoint being written in ``tmp``: add trainer.pt (``trainer_state`` and
    the RNG states), state.json and the completion mark, make them and the ``written``
    files durable, rename ``tmp`` to ``final`` and prune ``final``'s folder to the newest
    ``keep`` complete checkpoints."""
    torch.save({**trainer_state, "rng": rng_state()}, tmp / "trainer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **info}, indent=2))
    (tmp / COMPLETE).write_text("ok\n")
    for path in (*written, tmp / "trainer.pt", tmp / "state.json"):
        with open(path, "rb") as handle:  # durable before the rename publishes it
            os.fsync(handle.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in complete_checkpoints(final.parent)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary and unmarked folders are ignored)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("step-") and (p / COMPLETE).is_file())


def _device(module) -> torch.device:
    """Where ``module``'s parameters live (CPU for a module without any)."""
    return next(module.parameters(), torch.empty(0)).device


def _load_weights(module, path: Path) -> None:
    missing, unexpected = module.load_state_dict(load_file(path, device=str(_device(module))), strict=False)
    if unexpected:
        raise ValueError(f"checkpoint {path} has weights the model lacks: {unexpected[:3]}")
    trainable = {name for name, p in module.named_parameters() if p.requires_grad}
    lost = [name for name in missing if name in trainable and name not in _tied_aliases(module)]
    if lost:
        raise ValueError(f"checkpoint {path} lacks trainable weights: {lost[:3]}")


def load_checkpoint(folder: Path, *, model, critic_module=None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore the weights (and the critic's, when given) and the RNG states; returns
    ``(trainer_state, info)`` for the trainer's ``load_state_dict`` and the run directory.
    ``model`` None: the weights were restored otherwise (a sharded checkpoint)."""
    if model is not None:
        _load_weights(model, folder / "model.safetensors")
    if critic_module is not None:
        if not (folder / "critic.safetensors").is_file():
            raise ValueError(f"checkpoint {folder} has no critic (critic.safetensors) but the run's config uses one")
        _load_weights(critic_module, folder / "critic.safetensors")
    # Tensors land on the model's device, whichever device wrote them.
    state = torch.load(folder / "trainer.pt", map_location=_device(model) if model is not None else "cpu", weights_only=False)
    _keep_steps_on_cpu(state)
    set_rng_state(state.pop("rng"))
    info = json.loads((folder / "state.json").read_text())
    # Checkpoints written before trainers had a state_dict kept the step and the task
    # schedule (then called the sampler) in state.json.
    state.setdefault("step", info["step"])
    if "sampler" in info:
        state.setdefault("task_schedule", info["sampler"])
    return state, info


def _keep_steps_on_cpu(state: dict[str, Any]) -> None:
    """Put the step counters of ``state``'s optimizer states back on the CPU where their
    group is neither fused nor capturable: torch keeps them there (one host scalar each)
    and its ``load_state_dict`` moves every other state tensor to its parameter's device
    but leaves those steps where map_location put them."""
    for value in state.values():
        if not (isinstance(value, dict) and "state" in value and "param_groups" in value):
            continue
        for group in value["param_groups"]:
            if group.get("fused") or group.get("capturable"):
                continue
            for index in group["params"]:
                step = value["state"].get(index, {}).get("step")
                if isinstance(step, torch.Tensor):
                    value["state"][index]["step"] = step.cpu()


def _tied_aliases(model) -> set[str]:
    """Parameter names that share storage with an earlier one (restored through it)."""
    seen: set[int] = set()
    aliases = set()
    for name, value in model.state_dict().items():
        if value.data_ptr() in seen:
            aliases.add(name)
        seen.add(value.data_ptr())
    return aliases


FINAL_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def final_dtype(setting: str, model_name: str) -> torch.dtype:
    """The dtype of final/'s weights for ``final_dtype`` ``setting``: fp32, bf16, or
    original (the dtype ``model_name`` was published in)."""
    if setting == "original":
        return source_dtype(model_name)
    if setting not in FINAL_DTYPES:
        raise ValueError(f"final_dtype: expected original, fp32 or bf16, got {setting!r}")
    return FINAL_DTYPES[setting]


def save_final(model, tokenizer, folder: Path, *, dtype: torch.dtype | None = None, state_dict: dict[str, torch.Tensor] | None = None) -> None:
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

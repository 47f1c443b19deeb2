"""Atomic training checkpoints: weights, the trainer's state (optimizer, scheduler, counters), RNG states.

A checkpoint is written into a temporary folder, marked complete, fsynced (every file and
folder), then renamed into place and the rename fsynced, so neither a crash nor a power
loss mid-write leaves a folder that looks usable. Retention deletes old checkpoints only
after the new one is complete; a write that fails (a full disk) removes its temporary
folder and keeps the previous checkpoints. A SHA256SUMS manifest of every file is written
(and fsynced) before the rename and verified when a run picks the checkpoint to resume
from: a file that changed on disk afterwards (a flipped bit, not just a truncation) makes
the run fall back to the checkpoint before it. trainer.pt holds tensors and plain values only
and is loaded with ``weights_only=True``: a checkpoint cannot run code. A checkpoint loads
onto the device of the model it is restored into, whichever device wrote it (CUDA -> CPU
and back).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import pickle
import random
import shutil
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

COMPLETE = "COMPLETE"
MANIFEST = "SHA256SUMS"
"""Every other file's sha256, in ``sha256sum`` format (``cd step-N && sha256sum -c SHA256SUMS``).
sha256 over blake2b: measured on a 270 MB safetensors file (bf16 SmolLM2-135M) on this
project's 2-core AMD EPYC (shared, loaded), sha256 hashed 1.4 GB/s (0.19 s), blake2b 0.7 GB/s, md5 0.6 GB/s:
CPUs with SHA extensions (x86 since Zen / Ice Lake, ARMv8) run sha256 fastest of hashlib's,
and the manifest checks with the standard tool. About a second per GB at save and resume."""

logger = logging.getLogger(__name__)
_warned: set[str] = set()


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or one on disk cannot be used."""


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
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    # NumPy's state as a tensor and plain values: trainer.pt must load with weights_only=True.
    numpy_state = {
        "kind": kind,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "position": position,
        "has_gauss": has_gauss,
        "cached_gaussian": cached_gaussian,
    }
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    # Only once initialised: querying the states would otherwise start CUDA in a CPU run.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s states; the CUDA ones only onto as many devices as wrote
    them (a warning otherwise). Checkpoints from before CUDA states were saved have none."""
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))  # tuples may come back as lists
    numpy_state = state["numpy"]
    if isinstance(numpy_state, dict):
        keys = numpy_state["keys"]
        keys = keys.cpu().numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
        numpy_state = (
            numpy_state["kind"],
            keys.astype(np.uint32),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    np.random.set_state(numpy_state)  # a tuple: checkpoints written before the dict form
    # The generators take CPU byte tensors only, wherever map_location put the saved ones.
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda")
    if not cuda:
        return
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if devices != len(cuda):
        _warn_once(
            f"checkpoint: the CUDA RNG states of {len(cuda)} device(s) were not restored (this machine has {devices}); sampling on the GPU will not repeat the original run's"
        )
        return
    torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


def save_checkpoint(
    root: Path, step: int, *, model, trainer_state: dict[str, Any], info: dict[str, Any], keep: int, critic_module=None
) -> Path:
    """Write ``root/step-<step>`` atomically and prune to the newest ``keep`` complete ones.

    ``model`` (and ``critic_module``) weights go to safetensors, ``trainer_state`` (the
    trainer's ``state_dict()``: optimizer, scheduler, counters) and the RNG states to
    trainer.pt, ``info`` (JSON: what the run directory needs back, e.g. log line counts and
    finished stages) to state.json."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with writing_checkpoint(tmp, step):
        tmp.mkdir()
        save_file(trainable_state(model), tmp / "model.safetensors")
        if critic_module is not None:
            save_file(trainable_state(critic_module), tmp / "critic.safetensors")
    return publish_checkpoint(tmp, final, step=step, trainer_state=trainer_state, info=info, keep=keep)


@contextmanager
def writing_checkpoint(tmp: Path, step: int) -> Iterator[None]:
    """Write checkpoint ``step`` into ``tmp``: an OSError (a full disk, a lost mount)
    removes ``tmp`` and becomes one CheckpointError line; the complete checkpoints already
    there stay untouched."""
    try:
        yield
    except OSError as error:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = complete_checkpoints(tmp.parent)
        kept = f"the previous checkpoint {previous[-1].name} is kept" if previous else "there is no earlier checkpoint"
        reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
        raise CheckpointError(
            f"checkpoint step {step} not written: {reason} ({tmp.parent}); {kept}; free space, then --resume the run"
        ) from None


def publish_checkpoint(
    tmp: Path, final: Path, *, step: int, trainer_state: dict[str, Any], info: dict[str, Any], keep: int
) -> Path:
    """Finish the checkpoint being written in ``tmp``: add trainer.pt (``trainer_state`` and
    the RNG states), state.json and the completion mark, make every file and folder in
    ``tmp`` durable, rename ``tmp`` to ``final`` (durably) and prune ``final``'s folder to
    the newest ``keep`` complete checkpoints."""
    with writing_checkpoint(tmp, step):
        torch.save({**trainer_state, "rng": rng_state()}, tmp / "trainer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **info}, indent=2))
        write_manifest(tmp)  # after every other file (a sharded checkpoint's shards too)
        (tmp / COMPLETE).write_text("ok\n")
        _fsync_tree(tmp)  # durable before the rename publishes it
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync(final.parent)  # the rename itself survives a power loss
    for old in complete_checkpoints(final.parent)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file or a folder's entries) to the disk."""
    handle = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _fsync_tree(folder: Path) -> None:
    """fsync every file under ``folder``, then every folder, deepest first."""
    for current, _folders, files in os.walk(folder, topdown=False):
        for name in files:
            _fsync(Path(current) / name)
        _fsync(Path(current))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        buffer = bytearray(1 << 20)
        view = memoryview(buffer)
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """``folder/SHA256SUMS``: the sha256 of every file under ``folder`` but the completion mark."""
    files = sorted(path for path in folder.rglob("*") if path.is_file() and path.name not in (MANIFEST, COMPLETE))
    (folder / MANIFEST).write_text(
        "".join(f"{_sha256(path)}  {path.relative_to(folder).as_posix()}\n" for path in files)
    )


def _manifest_problem(folder: Path) -> str | None:
    """The first file of ``folder`` that is missing or differs from its SHA256SUMS entry;
    None when all match, or when there is no manifest (written before checksums were)."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return None
    for line in manifest.read_text().splitlines():
        digest, separator, name = line.partition("  ")
        if not separator or name.startswith("/") or ".." in Path(name).parts:
            return f"{MANIFEST} is malformed ({line[:80]!r})"
        if not (folder / name).is_file():
            return f"{name} is missing"
        if _sha256(folder / name) != digest:
            return f"{name} does not match its checksum (it changed on disk after it was written)"
    return None


def usable_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root`` whose files are whole and match their
    checksums, warning about each newer one skipped (truncated, corrupt or unreadable: e.g.
    the disk failed after the rename); None when there is none."""
    for folder in reversed(complete_checkpoints(root)):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        logger.warning(f"checkpoint {folder.name} is unusable ({problem}); falling back to the one before it")
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why the checkpoint ``folder`` cannot be loaded, found without loading it: a file
    missing, a safetensors file shorter than its header says, a trainer.pt whose zip
    records or checksums are broken, a state.json that does not parse, a file whose sha256
    differs from the manifest's; None when whole."""
    try:
        json.loads((folder / "state.json").read_text())
        for path in sorted(folder.glob("*.safetensors")):
            _check_safetensors(path)
        if not (folder / "model.safetensors").is_file() and not (folder / "sharded").is_dir():
            return "model.safetensors is missing"
        with zipfile.ZipFile(folder / "trainer.pt") as archive:
            bad = archive.testzip()  # reads every record, checking its CRC
        if bad is not None:
            return f"trainer.pt: {bad} is corrupt"
        # Last: the cheap checks above name a truncation more precisely than a checksum does.
        return _manifest_problem(folder)
    except (OSError, ValueError, zipfile.BadZipFile, struct.error) as error:
        return str(error) or type(error).__name__


def _check_safetensors(path: Path) -> None:
    """Raise ValueError when ``path`` is shorter than its header says (a truncated write)."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    if path.stat().st_size < 8 + length + end:
        raise ValueError(f"{path.name} is truncated ({path.stat().st_size} of {8 + length + end} bytes)")


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
    state = load_trainer_state(folder / "trainer.pt", map_location=_device(model) if model is not None else "cpu")
    _keep_steps_on_cpu(state)
    set_rng_state(state.pop("rng"))
    info = json.loads((folder / "state.json").read_text())
    # Checkpoints written before trainers had a state_dict kept the step and the task
    # schedule (then called the sampler) in state.json.
    state.setdefault("step", info["step"])
    if "sampler" in info:
        state.setdefault("task_schedule", info["sampler"])
    return state, info


def _numpy_array_globals() -> list:
    """What a NumPy array unpickles through: the RNG state of checkpoints written before it
    was stored as a tensor. Arrays of plain numbers only; their contents still go through
    the same restricted unpickler."""
    core = getattr(np, "_core", None) or np.core
    return [np.ndarray, np.dtype, core.multiarray._reconstruct, type(np.dtype(np.uint32))]


def load_trainer_state(path: Path, *, map_location) -> dict[str, Any]:
    """trainer.pt, loaded with ``weights_only=True``: tensors and plain values only, so a
    tampered checkpoint cannot run code; anything else is refused with a CheckpointError."""
    try:
        with torch.serialization.safe_globals(_numpy_array_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        found = (
            str(error).split("Unsupported global: GLOBAL ", 1)[-1].split(" ", 1)[0]
            if "Unsupported global" in str(error)
            else "a Python object"
        )
        raise CheckpointError(
            f"{path}: holds {found}, not just tensors and plain values; refused (loading it could run code). Resume from a checkpoint this version wrote"
        ) from None


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

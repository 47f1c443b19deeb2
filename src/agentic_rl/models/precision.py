"""Numeric precision of a run: ``fp32`` or ``bf16-mixed``, chosen per device, measured on CPUs.

``bf16-mixed`` keeps float32 master weights and optimizer state and runs the forward and
backward under bf16 autocast (:func:`compute_autocast`); the vocabulary head's logits,
log-probs, entropies, ratios and losses stay float32 (accel/head.py upcasts each logit
chunk). Rollouts may sample from a bf16 copy of the weights (engines/hf.py), refreshed in
place after each optimizer step.

``auto`` picks bf16-mixed on CUDA devices that support bf16, and on a CPU only when a
short matmul measurement shows bf16 clearly faster than float32 there: some CPUs run bf16
at twice the float32 rate (avx512_bf16, AMX), others emulate it several times slower. The
verdict is cached per CPU model and torch version (``<cache>/precision.json``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from agentic_rl.cache import cache_dir
from agentic_rl.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16-mixed")

BF16_MIN_SPEEDUP = 1.3
"""``auto`` picks bf16-mixed on a CPU only when bf16 matmuls run at least this much faster
than float32 ones: below that, the bf16 rounding is not worth it."""

_MEASURE_SHAPE = (512, 576, 1536)
"""(rows, in, out) of the probe product: a decoder MLP projection of a small model."""

_ATTRIBUTE = "agentic_rl_precision"


@dataclass(frozen=True)
class Resolved:
    precision: str
    """fp32 or bf16-mixed."""
    reason: str
    """Why, in a few words (reported in the run directory and the report)."""


def bf16_matmul_speedup(repeats: int = 5, shape: tuple[int, int, int] = _MEASURE_SHAPE) -> float:
    """float32 time / bf16 time of the same CPU matmul (best of ``repeats`` each, after a warm-up)."""
    rows, inner, out = shape
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, inner, generator=generator)
    w = torch.randn(out, inner, generator=generator)
    timings = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = x.to(dtype), w.to(dtype)
        torch.nn.functional.linear(a, b)
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            torch.nn.functional.linear(a, b)
            best = min(best, time.perf_counter() - started)
        timings[dtype] = best
    return timings[torch.float32] / max(timings[torch.bfloat16], 1e-12)


def _cpu_key() -> str:
    """This CPU model and torch build: what the measurement depends on."""
    name, flags = platform.processor(), ""
    try:
        with open("/proc/cpuinfo") as handle:
            lines = handle.read().splitlines()
        name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), name)
        flags = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("flags")), "")
    except OSError:
        pass
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"{name}|{digest}|torch {torch.__version__}|threads {torch.get_num_threads()}"


def _cache_file() -> Path:
    return cache_dir() / "precision.json"


def cpu_bf16_speedup() -> float:
    """The measured bf16 speedup of this CPU, from the cache when this CPU model was measured before."""
    key = _cpu_key()
    path = _cache_file()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if isinstance(cached.get(key), (int, float)):
        return float(cached[key])
    speedup = bf16_matmul_speedup()
    cached = cached if isinstance(cached, dict) else {}
    cached[key] = round(speedup, 3)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs a re-measurement next time
    return speedup


def resolve_precision(setting: str, device: torch.device | str) -> Resolved:
    """The precision ``setting`` (auto, fp32, bf16-mixed) means on ``device``; a setting
    that cannot run there is a ConfigError naming it."""
    if setting not in PRECISIONS:
        raise ConfigError(f"precision: expected one of {', '.join(PRECISIONS)}, got {setting!r}")
    device = torch.device(device)
    if setting == "fp32":
        return Resolved("fp32", "set in the config")
    if setting == "bf16-mixed":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(
                f"precision: bf16-mixed needs a GPU with bf16 support; {torch.cuda.get_device_name(device)} has none (use fp32)"
            )
        return Resolved("bf16-mixed", "set in the config")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Resolved("bf16-mixed", "auto: a CUDA device with bf16")
        return Resolved("fp32", "auto: this GPU has no bf16")
    if device.type != "cpu":
        return Resolved("fp32", f"auto: no bf16 measurement for {device.type} devices")
    speedup = cpu_bf16_speedup()
    if speedup >= BF16_MIN_SPEEDUP:
        return Resolved("bf16-mixed", f"auto: bf16 matmul measured {speedup:.2f}x float32 on this CPU")
    return Resolved(
        "fp32", f"auto: bf16 matmul measured {speedup:.2f}x float32 on this CPU (bf16-mixed needs {BF16_MIN_SPEEDUP}x)"
    )


def apply_precision(model, setting: str) -> Resolved:
    """Resolve ``setting`` on ``model``'s device and run its training forwards in it."""
    resolved = resolve_precision(setting, next(model.parameters()).device)
    set_compute_precision(model, resolved.precision)
    return resolved


def _root(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def set_compute_precision(model, precision: str) -> None:
    """Run ``model``'s training forwards (``compute_autocast``) in ``precision`` (fp32 or
    bf16-mixed); its parameters stay as they are (float32 master weights). Copies of the
    model (a KL reference, a separate critic) inherit the setting."""
    if precision not in ("fp32", "bf16-mixed"):
        raise ValueError(f"precision: expected fp32 or bf16-mixed, got {precision!r}")
    setattr(_root(model), _ATTRIBUTE, precision)


def compute_precision(model) -> str:
    """The precision ``model``'s training forwards run in (fp32 unless set)."""
    return getattr(_root(model), _ATTRIBUTE, "fp32")


@contextlib.contextmanager
def compute_autocast(model) -> Iterator[None]:
    """The forward of ``model`` in its compute precision: bf16 autocast for bf16-mixed
    (float32 parameters, bf16 products), nothing for fp32. Wrap forwards only: the backward
    runs outside the block (autograd casts the gradients back to the parameters' float32)."""
    if compute_precision(model) != "bf16-mixed":
        yield
        return
    device = next(model.parameters()).device
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        yield

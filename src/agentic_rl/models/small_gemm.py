"""Narrow float32 products for decoding on CPUs with AVX-512 (small_gemm.cpp).

A decode step multiplies one row per sequence by every weight matrix: it streams the
weights from memory and does little arithmetic on each. oneDNN's kernels reach about
24 GB/s of weights at 16 rows on our 2-core EPYC machines; ``small_gemm.cpp`` reaches
about 29 GB/s, and matches oneDNN at prefill sizes (``benchmarks/small_gemm.py``
measures both). The lean rollout forward (rollout/lean.py) uses it when it is available
and oneDNN otherwise.

The kernel is C++ built on first use with the system compiler (``$CXX``, else ``c++``)
for this machine's CPU and cached under ``<cache>/kernels`` (``AGENTIC_RL_CACHE``, default
``~/.cache/agentic-rl``); later processes load the cached library. It is available on
Linux x86-64 with AVX-512F, a C++ compiler and torch's OpenMP runtime (which it shares, so
``torch.set_num_threads`` applies). :func:`unavailable_reason` says why not otherwise;
``AGENTIC_RL_SMALL_GEMM=0`` turns it off. Results equal ``F.linear`` up to float32
rounding: each output is an in-order sum over the inputs (tests/models/test_small_gemm.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("small_gemm.cpp")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
ABI = 1
OPS = {"none": 0, "add": 1, "mul": 2, "swish": 3}
"""Epilogues applied to x W^T + b before the store: add / multiply by ``other``, or SiLU."""

_lock = threading.Lock()
_state: dict = {}


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            lines = [line for line in handle if line.startswith(("flags", "model name"))]
    except OSError:
        return ""
    return "".join(sorted(set(lines)))


def _openmp_runtimes() -> set[str]:
    """Files of OpenMP runtimes mapped into this process (one expected: torch's)."""
    try:
        with open("/proc/self/maps") as handle:
            paths = {line.split()[-1] for line in handle if line.rstrip().endswith(".so") or ".so." in line}
    except OSError:
        return set()
    return {path for path in paths if any(name in os.path.basename(path) for name in ("libgomp", "libiomp", "libomp"))}


def _build(compiler: str) -> Path:
    """The compiled library for this source, compiler and CPU (built once, then cached)."""
    from agentic_rl.models.loading import cache_dir

    source = SOURCE.read_bytes()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256(b"\0".join([source, version.encode(), " ".join(FLAGS).encode(), _cpu_flags().encode()])).hexdigest()[:16]
    folder = cache_dir() / "kernels"
    target = folder / f"small_gemm-{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: concurrent processes never load a partial file.
    handle, partial = tempfile.mkstemp(dir=folder, suffix=".so.partial")
    os.close(handle)
    try:
        result = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", partial], capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            first = (result.stderr.strip().splitlines() or ["no output"])[0]
            raise RuntimeError(f"{compiler} failed: {first}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def _load_checks() -> None:
    """Raise RuntimeError when this machine cannot run the kernel."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise RuntimeError(f"needs Linux on x86-64 (this is {sys.platform} on {platform.machine()})")
    if " avx512f " not in f" {_cpu_flags().replace(chr(10), ' ')} ":
        raise RuntimeError("this CPU has no AVX-512F")
    if "OpenMP" not in torch.__config__.parallel_info():
        raise RuntimeError("torch is not built with OpenMP")


def _load():
    _load_checks()
    compiler = _compiler()
    if not compiler:
        raise RuntimeError("no C++ compiler found (set CXX or install g++)")
    before = _openmp_runtimes()
    library = ctypes.CDLL(str(_build(compiler)))
    if len(_openmp_runtimes()) > max(1, len(before)):
        raise RuntimeError("the compiled kernel loaded a second OpenMP runtime beside torch's")
    if library.agentic_rl_small_gemm_abi() != ABI:
        raise RuntimeError("cached kernel library has another ABI version")
    gemm = library.agentic_rl_small_gemm
    gemm.restype = ctypes.c_int
    gemm.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    pack_fn = library.agentic_rl_small_gemm_pack
    pack_fn.restype = None
    pack_fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return gemm, pack_fn, library.agentic_rl_small_gemm_block()


def _library():
    """(gemm, pack, block width) or None; loaded, and checked against F.linear, once."""
    if "library" in _state:
        return _state["library"]
    with _lock:
        if "library" not in _state:
            library, reason = None, None
            if os.environ.get("AGENTIC_RL_SMALL_GEMM", "1") == "0":
                reason = "turned off by AGENTIC_RL_SMALL_GEMM=0"
            else:
                try:
                    library = _load()
                    _state["library"] = library  # the self-check below runs the kernel
                    reason = _self_check()
                except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                    reason = str(error)
                if reason:
                    library = None
                    logger.info("small-row float32 kernel not used (decoding uses oneDNN): %s", reason)
            _state["library"], _state["reason"] = library, reason
    return _state["library"]


def _self_check() -> str | None:
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(shape, generator=generator) for shape in ((11, 70), (53, 70), (53,)))
    got = PackedLinear(weight, bias)(x)
    if not torch.allclose(got, torch.nn.functional.linear(x, weight, bias), rtol=1e-4, atol=1e-4):
        return "the compiled kernel disagrees with torch on a self-check"
    return None


def available() -> bool:
    """Whether :class:`PackedLinear` can run here (builds the kernel on first call)."""
    return _library() is not None


def unavailable_reason() -> str | None:
    """Why the kernel is not available, or None when it is."""
    _library()
    return _state.get("reason")


class PackedLinear:
    """``op``(x W^T + b) for float32 CPU rows, with ``weight`` [out, in] (and ``bias``) copied
    into the kernel's layout: valid while they do not change. No autograd (inference only).

    ``packed(x, op="none", other=None)``: ``x`` [..., in] -> [..., out]; ``op`` one of
    :data:`OPS` ("add" and "mul" take ``other`` of the output's shape)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        gemm, pack_fn, block = _required()
        if weight.dim() != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError(f"PackedLinear: weight must be a 2-D float32 CPU tensor, got {tuple(weight.shape)} {weight.dtype} on {weight.device}")
        weight = weight.detach()
        if weight.stride(1) != 1:
            weight = weight.contiguous()
        self.out_features, self.in_features = weight.shape
        self.data = torch.empty(-(-self.out_features // block), self.in_features, block)
        pack_fn(weight.data_ptr(), self.out_features, self.in_features, weight.stride(0), self.data.data_ptr())
        self.bias = None
        if bias is not None:
            if bias.shape != (self.out_features,) or bias.dtype != torch.float32 or bias.device.type != "cpu":
                raise ValueError(f"PackedLinear: bias must be float32 on CPU of shape ({self.out_features},), got {tuple(bias.shape)} {bias.dtype}")
            self.bias = bias.detach().contiguous().clone()
        # Fixed arguments of every call (a decode step makes ~150 calls: keep them cheap).
        self._gemm = gemm
        self._pointers = (self.data.data_ptr(), self.out_features, None if self.bias is None else self.bias.data_ptr())

    def __call__(self, x: torch.Tensor, op: str = "none", other: torch.Tensor | None = None) -> torch.Tensor:
        # The checks stay cheap (attributes, no device objects): this runs ~150 times a step.
        code = OPS.get(op)
        if code is None or x.dtype is not torch.float32 or not x.is_cpu or not x.ndim or x.shape[-1] != self.in_features:
            raise ValueError(self._bad_input(x, op))
        if not x.is_contiguous():
            x = x.contiguous()
        out = torch.empty((*x.shape[:-1], self.out_features))  # a tuple: torch.Size + tuple costs 2 us
        other_pointer = None
        if code == 1 or code == 2:
            if other is None or other.shape != out.shape or other.dtype is not torch.float32 or not other.is_cpu:
                raise ValueError(f"PackedLinear: op {op!r} needs other, float32 on CPU of shape {tuple(out.shape)}")
            if not other.is_contiguous():
                other = other.contiguous()
            other_pointer = other.data_ptr()
        rows = x.numel() // self.in_features if self.in_features else out.numel() // max(self.out_features, 1)
        if rows and self.out_features:
            weight, out_features, bias = self._pointers
            if self._gemm(x.data_ptr(), rows, self.in_features, weight, out_features, bias, code, other_pointer, out.data_ptr()) != 0:
                raise MemoryError("PackedLinear: could not allocate the kernel's row panels")
        return out

    def _bad_input(self, x: torch.Tensor, op: str) -> str:
        if op not in OPS:
            return f"PackedLinear: op {op!r} is not one of: {', '.join(OPS)}"
        return f"PackedLinear: x must be float32 on CPU with last dimension {self.in_features}, got {tuple(x.shape)} {x.dtype} on {x.device}"


def _required():
    library = _library()
    if library is None:
        raise RuntimeError(f"the small-row kernel is not available: {_state.get('reason')}")
    return library

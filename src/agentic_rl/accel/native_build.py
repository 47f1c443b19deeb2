"""Build, cache and load the native kernels (native.cpp) for this machine: the compiler,
the flags, the cache key and the ctypes signatures. accel/native.py checks the result
against torch and wraps it (:class:`~agentic_rl.accel.native.PackedLinear`,
:func:`~agentic_rl.accel.native.decode_attention`)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from agentic_rl.cache import cache_dir

SOURCE = Path(__file__).with_name("native.cpp")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
ABI = 3
"""The kernels' calling contract version (``agentic_rl_native_abi``): a cached library of another is refused."""


def cpu_flags() -> str:
    """The CPU's model name and flags lines of /proc/cpuinfo ("" where there is none)."""
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


def library_key(compiler: str) -> str:
    """The cached library's name: a hash of everything the build depends on (the source,
    the flags, the compiler's version and this CPU's flags)."""
    source = SOURCE.read_bytes()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    return hashlib.sha256(
        b"\0".join([source, version.encode(), " ".join(FLAGS).encode(), cpu_flags().encode()])
    ).hexdigest()[:16]


def build(compiler: str) -> Path:
    """The compiled library for this source, compiler and CPU (built once, then cached)."""
    folder = cache_dir() / "kernels"
    target = folder / f"native-{library_key(compiler)}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: concurrent processes never load a partial file.
    handle, partial = tempfile.mkstemp(dir=folder, suffix=".so.partial")
    os.close(handle)
    try:
        result = subprocess.run(
            [compiler, *FLAGS, str(SOURCE), "-o", partial], capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            first = (result.stderr.strip().splitlines() or ["no output"])[0]
            raise RuntimeError(f"{compiler} failed: {first}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def compiler() -> str | None:
    """``$CXX`` when it names an executable, else ``c++`` or ``g++`` on the PATH; None when none is there."""
    compiler = os.environ.get("CXX")
    if compiler:
        return compiler if shutil.which(compiler) else None
    return shutil.which("c++") or shutil.which("g++")


def check_machine() -> None:
    """Raise RuntimeError when this machine cannot run the kernel."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise RuntimeError(f"needs Linux on x86-64 (this is {sys.platform} on {platform.machine()})")
    if " avx512f " not in f" {cpu_flags().replace(chr(10), ' ')} ":
        raise RuntimeError("this CPU has no AVX-512F")
    if "OpenMP" not in torch.__config__.parallel_info():
        raise RuntimeError("torch is not built with OpenMP")


def load() -> dict:
    """The kernels by name (ctypes functions, and "block": the packed column width), built
    or taken from the cache; RuntimeError says why not (no compiler, a failed build, a
    second OpenMP runtime, another ABI). The caller checks them against torch."""
    found = compiler()
    if not found:
        named = (
            f"CXX={os.environ['CXX']!r} is not an executable" if os.environ.get("CXX") else "no c++ or g++ on the PATH"
        )
        raise RuntimeError(f"no C++ compiler found ({named}; install g++ or set CXX)")
    before = _openmp_runtimes()
    library = ctypes.CDLL(str(build(found)))
    if len(_openmp_runtimes()) > max(1, len(before)):
        raise RuntimeError("the compiled kernel loaded a second OpenMP runtime beside torch's")
    if library.agentic_rl_native_abi() != ABI:
        raise RuntimeError("cached kernel library has another ABI version")
    pointer, size, integer = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    functions = {
        "gemm": (
            ctypes.c_int,
            [pointer, size, size, pointer, size, pointer, integer, pointer, pointer, pointer, ctypes.c_float],
        ),
        "gemm_bf16": (
            ctypes.c_int,
            [pointer, size, size, pointer, size, pointer, integer, pointer, pointer, pointer, ctypes.c_float],
        ),
        "pack": (None, [pointer, size, size, size, pointer]),
        "pack_bf16": (None, [pointer, size, size, size, pointer]),
        "decode_attention": (
            ctypes.c_int,
            [pointer, size, pointer, pointer, size, size, pointer, size, size, size, size, size, pointer],
        ),
    }
    kernels = {}
    for name, (restype, argtypes) in functions.items():
        function = getattr(library, f"agentic_rl_native_{name}")
        function.restype, function.argtypes = restype, argtypes
        kernels[name] = function
    kernels["block"] = library.agentic_rl_native_block()
    return kernels

"""Keep freed host memory in the process (glibc malloc) instead of returning it to the OS.

A training step allocates and frees gigabytes of activations. glibc's defaults hand
freed heap tops back to the kernel (trim threshold ~2x the mmap threshold) and serve
blocks above a dynamic threshold with fresh mmaps, so every step faults the same
memory in again, page by page: on the 2-core VM we measure on that was 0.5-2.2 GB of
page faults per training step (``ru_minflt``) and about 10-15% of its time. Blocks
above glibc's largest mmap threshold (32 MB: vocabulary-sized gradients, 113 MB each
for a 49k x 576 embedding) would still be mapped fresh each time, so mmap is turned off
altogether: every block comes from the heap, which a raised trim threshold keeps mapped
and reused (another ~0.3 s of a 6 s training step there). Set
``AGENTIC_RL_MALLOC_TUNING=0`` to keep glibc's defaults.

The price: freed memory is never handed back, and blocks of changing sizes (SFT batches,
evaluation, RL updates of other lengths) fragment the heap, so the resident size climbs
past any one phase's peak (a search-qa run measured 17 GB where one update peaks at 9).
:func:`release_memory` hands the free pages back (``malloc_trim``): the pipeline calls it
between stages, and the RL trainer after a step once the process holds more than half of
the machine's memory, so a run's memory stays bounded by its largest phase while the
steps in between keep reusing theirs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4

_tuned: bool | None = None
_libc = None


def tune_malloc() -> bool:
    """Apply the settings once per process (glibc on Linux only); True when in effect."""
    global _tuned
    if _tuned is not None:
        return _tuned
    _tuned = False
    if not sys.platform.startswith("linux") or os.environ.get("AGENTIC_RL_MALLOC_TUNING", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        return False
    global _libc
    _libc = libc
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _tuned = bool(
        # With no mmap, glibc still falls back to it when the heap cannot grow.
        mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) and mallopt(_M_TOP_PAD, 64 << 20)
    )
    return _tuned


def resident_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc``; None elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def reset_device_peak(device) -> None:
    """Start a new peak for :func:`device_peak_bytes` (CUDA devices; nothing elsewhere)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def device_peak_bytes(device) -> int | None:
    """The most the CUDA caching allocator held in live tensors on ``device`` since the last
    :func:`reset_device_peak` (what the memory planner estimates); None off CUDA."""
    import torch

    if torch.device(device).type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))


def physical_bytes() -> int | None:
    """The machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def release_memory(*, above: float | None = None) -> int:
    """Hand the heap's free pages back to the OS (glibc ``malloc_trim``) where
    :func:`tune_malloc` keeps them, so the next phase faults in only what it uses; returns
    the resident bytes released (0 where tuning is off: glibc then trims by itself).
    ``above``: only when this process holds more than that fraction of physical memory
    (for steps that reuse their memory: a trim costs the next step its page faults)."""
    if not _tuned or _libc is None:
        return 0
    before = resident_bytes()
    if before is None:
        return 0
    if above is not None:
        total = physical_bytes()
        if total is None or before <= above * total:
            return 0
    _libc.malloc_trim(0)
    after = resident_bytes()
    return max(before - (after if after is not None else before), 0)

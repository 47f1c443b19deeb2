"""Keep freed host memory in the process (glibc malloc) instead of returning it to the OS.

A training step allocates and frees gigabytes of activations. glibc's defaults hand
freed heap tops back to the kernel (trim threshold ~2x the mmap threshold) and serve
blocks above a dynamic threshold with fresh mmaps, so every step faults the same
memory in again, page by page: on the 2-core VM we measure on that was 0.5-2.2 GB of
page faults per training step (``ru_minflt``) and about 10-15% of its time. Blocks
above glibc's largest mmap threshold (32 MB: vocabulary-sized gradients, 113 MB each
for a 49k x 576 embedding) would still be mapped fresh each time, so mmap is turned off
altogether: every block comes from the heap, which a raised trim threshold keeps mapped
and reused (another ~0.3 s of a 6 s training step there). The price is that the
process's resident size stays near its peak. Set ``AGENTIC_RL_MALLOC_TUNING=0`` to keep
glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4

_tuned: bool | None = None


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
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _tuned = bool(
        # With no mmap, glibc still falls back to it when the heap cannot grow.
        mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) and mallopt(_M_TOP_PAD, 64 << 20)
    )
    return _tuned

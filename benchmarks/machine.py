"""The machine a benchmark ran on, printed beside every figure (figures differ by CPU)."""

from __future__ import annotations

import os

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags that decide which kernels run (AVX-512 native kernels, bf16 products)."""


def cpu_description() -> str:
    """e.g. "AMD EPYC (2 CPUs; avx2, avx512f, avx512_bf16)"."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} CPUs; {', '.join(f for f in FLAGS if f in flags) or 'no avx2'})"

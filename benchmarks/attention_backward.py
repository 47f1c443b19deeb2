"""Causal grouped-query attention, forward and backward, in bf16 and in float32 on this CPU.

    python benchmarks/attention_backward.py [--lengths 64 180 300] [--rows 16] [--repeats 10]

Shapes are SmolLM2-135M's (9 query heads, 3 key/value heads, head dim 64) with ``--rows``
sequences of each length, through ``F.scaled_dot_product_attention`` (PyTorch's CPU
flash kernel). Printed per length: milliseconds of a forward alone and of a forward plus
backward, bf16 and float32 inputs, best of ``--repeats``. models/attention.py computes a
CPU training forward's attention in float32 where this shows its backward faster.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from machine import cpu_description


def best_ms(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return 1e3 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 180, 300])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'length':>6} {'dtype':>9} {'fwd ms':>8} {'fwd+bwd ms':>11}")
    generator = torch.Generator().manual_seed(0)
    for length in args.lengths:
        shapes = [(args.rows, heads, length, 64) for heads in (9, 3, 3)]
        base = [torch.randn(shape, generator=generator) for shape in shapes]
        for dtype in (torch.bfloat16, torch.float32):
            q, k, v = (x.to(dtype).requires_grad_() for x in base)

            def forward(q=q, k=k, v=v):
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

            def both(q=q, k=k, v=v):
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()

            name = str(dtype).removeprefix("torch.")
            print(f"{length:>6} {name:>9} {best_ms(forward, args.repeats):8.2f} {best_ms(both, args.repeats):11.2f}")


if __name__ == "__main__":
    main()

"""Decode-sized float32 products: the native kernel (accel/native.cpp, with float32 and with
bf16 weights) against oneDNN (packed weights) and torch's default ``F.linear``, over every
projection of a model's layers plus its head.

    python benchmarks/native_kernels.py [--rows 1 4 16 32 64 256] [--repeats 5] [--json out.json]

Shapes default to SmolLM2-135M's (30 layers: q/k/v fused 576->960, o 576->576, gate and
up 576->1536, down 1536->576; head 576->49152), about 540 MB of float32 weights, more than
the last-level cache, so each pass streams them from memory as a decode step does.
Reported per row count: milliseconds per pass, weights streamed (GB/s: bf16 weights are
half the bytes) and GFLOP/s; best of ``--repeats`` rounds, the kernels alternating inside
each round.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from machine import cpu_description


def shapes(layers: int, hidden: int, qkv: int, intermediate: int, vocab: int) -> list[tuple[int, int]]:
    per_layer = [
        (qkv, hidden),
        (hidden, hidden),
        (intermediate, hidden),
        (intermediate, hidden),
        (hidden, intermediate),
    ]
    return per_layer * layers + [(vocab, hidden)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 32, 64, 256])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--qkv", type=int, default=960)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from agentic_rl.accel import native
    from agentic_rl.accel.onednn import onednn_available, onednn_linear, pack_weight

    if not native.available():
        raise SystemExit(f"the native kernels are not available here: {native.unavailable_reason()}")
    generator = torch.Generator().manual_seed(0)
    weights = [
        torch.randn(shape, generator=generator) * 0.02
        for shape in shapes(args.layers, args.hidden, args.qkv, args.intermediate, args.vocab)
    ]
    gigabytes = sum(w.numel() for w in weights) * 4 / 1e9
    ours = [native.PackedLinear(w) for w in weights]
    ours_bf16 = [native.PackedLinear(w.to(torch.bfloat16)) for w in weights]
    kernels = {
        "native": lambda x: [p(x[p.in_features]) for p in ours],
        "native-bf16": lambda x: [p(x[p.in_features]) for p in ours_bf16],
    }
    streamed = {"native-bf16": gigabytes / 2}
    if onednn_available():
        packed = [pack_weight(w) for w in weights]
        kernels["onednn"] = lambda x: [onednn_linear(x[w.shape[1]], p, None) for w, p in zip(weights, packed)]
    kernels["torch"] = lambda x: [F.linear(x[w.shape[1]], w) for w in weights]

    print(f"CPU: {cpu_description()}; torch {torch.__version__}")
    print(f"{len(weights)} products, {gigabytes * 1000:.0f} MB of float32 weights, {torch.get_num_threads()} threads")
    print(f"{'rows':>5} " + " ".join(f"{name + ' ms':>14} {'GB/s':>6} {'GFLOP/s':>7}" for name in kernels))
    results = {"cpu": cpu_description(), "threads": torch.get_num_threads(), "weights_gb": gigabytes, "rows": []}
    for rows in args.rows:
        inputs = {width: torch.randn(rows, width, generator=generator) for width in {w.shape[1] for w in weights}}
        best = dict.fromkeys(kernels, float("inf"))
        for run in kernels.values():
            run(inputs)  # warm-up
        for _ in range(args.repeats):
            for name, run in kernels.items():
                started = time.perf_counter()
                run(inputs)
                best[name] = min(best[name], time.perf_counter() - started)
        flops = 2 * rows * gigabytes * 1e9 / 4
        row = {
            "rows": rows,
            **{
                name: {
                    "ms": seconds * 1e3,
                    "gb_per_s": streamed.get(name, gigabytes) / seconds,
                    "gflop_per_s": flops / seconds / 1e9,
                }
                for name, seconds in best.items()
            },
        }
        results["rows"].append(row)
        print(
            f"{rows:>5} "
            + " ".join(
                f"{row[name]['ms']:>14.1f} {row[name]['gb_per_s']:>6.1f} {row[name]['gflop_per_s']:>7.0f}"
                for name in kernels
            ),
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()

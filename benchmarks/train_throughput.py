"""Training throughput: forward+backward tokens/s of the policy-gradient log-prob pass, and
its fraction of this machine's fp32 matmul peak (measured here, in the same run).

    python benchmarks/train_throughput.py [--model smollm2-135m] [--batch 8] [--length 256]
        [--response-fraction 0.5] [--repeats 5] [--checkpointing] [--compile] [--json out.json]

Peak: the best GFLOP/s of square fp32 matmuls (1024..2048) with all threads, over the
kernel libraries torch ships (MKL's torch.mm and oneDNN); measured once over all sizes
and again (2048 only) right before each timed step, because a shared VM's speed drifts
by 10-20% within a minute: each step's fraction is taken against the peak beside it and
the median fraction is reported, with the fraction of the run's best peak as the
conservative figure. Workload:
``--batch`` sequences of ``--length`` tokens sharing no prefix, the last
``--response-fraction`` of each selected for the loss (as RL batches are), through
``training.logprobs.token_logprobs`` and ``backward``. Achieved FLOPs count the linear
layers (6 x params x tokens), the vocabulary projection at selected positions only
(that is all the code computes) and causal attention (6 x layers x width x tokens x T/2 x 2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def matmul_peak(repeats: int = 5, sizes: tuple[int, ...] = (1024, 1536, 2048)) -> dict[str, float]:
    """Best fp32 GFLOP/s over a few square sizes, per kernel library in this torch build:
    torch.mm (MKL/OpenBLAS) and, where present, oneDNN (which the training path uses on
    CPU). The machine's peak is the best of them: MKL takes a slow code path on some
    CPUs (e.g. AMD EPYC), so its figure alone would understate what the hardware does."""
    from agentic_rl.accel.onednn import linear, onednn_available

    kernels = {"torch.mm": lambda a, b: a @ b}
    if onednn_available():
        kernels["onednn"] = lambda a, b: linear(a, b.t())
    best = dict.fromkeys(kernels, 0.0)
    for size in sizes:
        a, b = torch.randn(size, size), torch.randn(size, size)
        for name, product in kernels.items():
            product(a, b)
            for _ in range(repeats):
                started = time.perf_counter()
                product(a, b)
                best[name] = max(best[name], 2 * size**3 / (time.perf_counter() - started) / 1e9)
    return best


def flops_per_step(model, batch: int, length: int, selected: int) -> float:
    config = model.config
    linear = sum(m.weight.numel() for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in name)
    head = config.vocab_size * config.hidden_size
    width = config.num_attention_heads * (getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    attention = 6 * config.num_hidden_layers * width * length * batch * length  # QK^T and AV, causal half, fwd+bwd x3
    return 6 * linear * batch * length + 6 * head * selected + attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--response-fraction", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing (trades compute for memory)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the backbone")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from agentic_rl.models import load
    from agentic_rl.accel import linear_kernel
    from agentic_rl.training.logprobs import token_logprobs
    from agentic_rl.training.speed import apply_speed_options

    peaks = matmul_peak()
    peak = max(peaks.values())
    model, _ = load(args.model, device="cpu")
    model.train()
    apply_speed_options(model, gradient_checkpointing=args.checkpointing, compile=args.compile)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, model.config.vocab_size, (args.batch, args.length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    select = torch.zeros_like(input_ids)
    select[:, int(args.length * (1 - args.response_fraction)) :] = 1
    selected = int(select[:, 1:].sum())

    def step() -> None:
        logprobs, _ = token_logprobs(model, input_ids, attention_mask, select)
        (-(logprobs * select).sum() / selected).backward()
        model.zero_grad(set_to_none=True)

    step()  # warm-up (and compilation)
    flops = flops_per_step(model, args.batch, args.length, selected)
    times, local_peaks = [], []
    for _ in range(args.repeats):
        local_peaks.append(max(matmul_peak(repeats=3, sizes=(2048,)).values()))
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    tokens = args.batch * args.length
    achieved = flops / seconds / 1e9
    fraction_beside = statistics.median(flops / t / 1e9 / p for t, p in zip(times, local_peaks))
    peak = max(peak, *local_peaks)
    result = {
        "model": args.model, "threads": torch.get_num_threads(), "batch": args.batch, "length": args.length,
        "checkpointing": args.checkpointing, "compile": args.compile, "seconds_per_step": seconds, "step_seconds": times,
        "tokens_per_s": tokens / seconds, "achieved_gflops": achieved, "matmul_peak_gflops": peak, "matmul_peak_by_kernel": peaks,
        "peaks_beside_steps_gflops": local_peaks, "fraction_of_peak": achieved / peak, "fraction_of_peak_beside_step": fraction_beside,
        "linear_kernel": linear_kernel(model),
    }
    by_kernel = ", ".join(f"{name} {value:.1f}" for name, value in peaks.items())
    print(f"fp32 matmul peak        {peak:8.1f} GFLOP/s ({torch.get_num_threads()} threads; sweep: {by_kernel}; beside steps: {min(local_peaks):.0f}-{max(local_peaks):.0f})")
    print(f"fwd+bwd                 {tokens / seconds:8.1f} tokens/s  ({seconds:.2f} s per {args.batch}x{args.length} batch, median of {args.repeats}: {min(times):.2f}-{max(times):.2f})")
    print(f"achieved                {achieved:8.1f} GFLOP/s = {100 * fraction_beside:.0f}% of the peak measured beside each step (median); {100 * achieved / peak:.0f}% of the run's best peak")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()

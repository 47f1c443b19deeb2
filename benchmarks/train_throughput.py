"""Training throughput: forward+backward tokens/s of the policy-gradient log-prob pass in
fp32 and in bf16-mixed, and each one's fraction of this machine's matmul peak in its own
dtype (measured here, in the same run).

    python benchmarks/train_throughput.py [--model smollm2-135m] [--batch 8] [--length 256]
        [--response-fraction 0.5] [--repeats 5] [--precision fp32 bf16-mixed]
        [--peak-sizes 1024 1536 2048] [--checkpointing] [--compile] [--json out.json]

Precisions (``--precision``, default both): ``fp32`` runs everything in float32;
``bf16-mixed`` keeps the same float32 weights and runs the forward under bf16 autocast
(``models.precision.set_compute_precision`` on the same model object; the backward
follows the forward's dtypes). Whether bf16 pays depends on the CPU: with avx512_bf16 or
AMX its matmuls run about twice the float32 rate, on AVX2-only CPUs (e.g. AMD Zen 3)
torch emulates them several times slower. The run starts by printing this machine's
bf16/fp32 matmul speed ratio (``models.precision.bf16_matmul_speedup``) so a reader knows
which case the numbers come from. The precisions alternate within each repeat (fp32
step, bf16-mixed step, fp32 step, ...) so that the machine's drift hits both; the
summary line is the ratio of their median tokens/s.

Peak, per dtype: the best GFLOP/s of square matmuls (``--peak-sizes``, 1024..2048) with
all threads, over the kernel libraries torch ships: ``torch.mm`` (MKL), oneDNN's inner
product (which our float32 linear layers use on CPU; skipped for a dtype the CPU has no
oneDNN kernel for) and, for bf16, ``F.linear`` (what the linear layers call under
autocast) and a^T b (emulated bf16 speed depends on the layout: ``matmul_kernels``).
Measured once over all sizes and again (the largest size, the sweep's fastest kernel)
right before each timed step, because a shared VM's speed drifts by 10-20% within a
minute: each step's fraction is taken against the peak beside it and the median
fraction is reported, with the fraction of the run's best peak as the conservative figure.

Workload: ``--batch`` sequences of ``--length`` tokens sharing no prefix, the last
``--response-fraction`` of each selected for the loss (as RL batches are), through
``training.logprobs.token_logprobs`` and ``backward``. Achieved FLOPs (the same count for
both precisions) cover the linear layers (6 x params x tokens), the vocabulary
projection at selected positions only (that is all the code computes) and causal
attention (6 x layers x width x tokens x T/2 x 2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

PRECISIONS = ("fp32", "bf16-mixed")
DTYPES = {"fp32": torch.float32, "bf16-mixed": torch.bfloat16}


def matmul_kernels(dtype: torch.dtype) -> dict:
    """The square-product kernels to measure in ``dtype``: name -> fn(a, b), 2 n^3 FLOPs each.

    float32: ``torch.mm`` (MKL) and oneDNN's inner product. bf16: torch's emulated bf16
    gemm (what the linear layers run under autocast on CPUs without native bf16) depends
    on the operands' layout by up to 25x (measured on an AVX2 EPYC at 1024: a^T b ~13,
    a b^T ~5, a b ~0.5 GFLOP/s), so both fast layouts are measured: ``F.linear`` (x W^T,
    the forward's product) and ``torch.mm`` as a^T b (the weight gradient's); and oneDNN
    where the CPU has a bf16 kernel for it (avx512_bf16 / AMX)."""
    from agentic_rl.accel.onednn import onednn_available, onednn_linear

    if dtype == torch.float32:
        kernels = {"torch.mm": lambda a, b: a @ b}
    else:
        kernels = {"F.linear": torch.nn.functional.linear, "torch.mm a^T b": lambda a, b: a.t() @ b}
    if onednn_available():
        probe = torch.ones(16, 16, dtype=dtype)
        try:  # oneDNN has no bf16 inner product on CPUs without AVX-512
            onednn_linear(probe, probe, None)
            kernels["onednn"] = lambda a, b: onednn_linear(a, b.t(), None)
        except RuntimeError:
            pass
    return kernels


def matmul_peak(
    dtype: torch.dtype = torch.float32,
    repeats: int = 5,
    sizes: tuple[int, ...] = (1024, 1536, 2048),
    kernels: dict | None = None,
    budget_s: float = 5.0,
) -> dict[str, float]:
    """Best GFLOP/s in ``dtype`` over a few square sizes, per kernel library in this torch
    build. The machine's peak is the best of them: MKL takes a slow code path on some CPUs
    (e.g. AMD EPYC), so its figure alone would understate what the hardware does. A kernel
    stops repeating a size once it has spent ``budget_s`` on it (emulated bf16 at 2048)."""
    kernels = kernels or matmul_kernels(dtype)
    best = dict.fromkeys(kernels, 0.0)
    for size in sizes:
        a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
        for name, product in kernels.items():
            spent = 0.0
            for attempt in range(repeats + 1):  # the first call warms up
                started = time.perf_counter()
                product(a, b)
                seconds = time.perf_counter() - started
                spent += seconds
                if attempt:
                    best[name] = max(best[name], 2 * size**3 / seconds / 1e9)
                    if spent > budget_s:
                        break
    return best


def flops_per_step(model, batch: int, length: int, selected: int) -> float:
    config = model.config
    linear = sum(
        m.weight.numel()
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and "lm_head" not in name
    )
    head = config.vocab_size * config.hidden_size
    width = config.num_attention_heads * (
        getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    )
    attention = 6 * config.num_hidden_layers * width * length * batch * length  # QK^T and AV, causal half, fwd+bwd x3
    return 6 * linear * batch * length + 6 * head * selected + attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--response-fraction", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--precision",
        nargs="+",
        choices=PRECISIONS,
        default=list(PRECISIONS),
        help="compute precisions to measure (default: both, alternating)",
    )
    parser.add_argument(
        "--peak-sizes",
        type=int,
        nargs="+",
        default=[1024, 1536, 2048],
        help="square matmul sizes of the peak sweep (the largest is re-measured beside each step)",
    )
    parser.add_argument(
        "--checkpointing", action="store_true", help="activation checkpointing (trades compute for memory)"
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the backbone")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    precisions = list(dict.fromkeys(args.precision))

    from agentic_rl.accel import linear_kernel
    from agentic_rl.models import load
    from agentic_rl.models.precision import bf16_matmul_speedup, set_compute_precision
    from agentic_rl.training.logprobs import token_logprobs
    from agentic_rl.training.speed import apply_speed_options

    speedup = bf16_matmul_speedup()
    kind = (
        "native bf16 (avx512_bf16 / AMX class)" if speedup >= 1.0 else "bf16 emulated: slower than float32 on this CPU"
    )
    print(
        f"bf16/fp32 matmul speed  {speedup:8.2f}x  ({kind}; models.precision.bf16_matmul_speedup, {torch.get_num_threads()} threads)",
        flush=True,
    )
    sizes = tuple(args.peak_sizes)
    sweeps = {p: matmul_peak(DTYPES[p], sizes=sizes) for p in precisions}
    model, _ = load(args.model, device="cpu")  # float32 weights for both precisions
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

    for precision in precisions:  # warm-up (and compilation) of each side
        set_compute_precision(model, precision)
        step()
    flops = flops_per_step(model, args.batch, args.length, selected)
    tokens = args.batch * args.length
    # Beside each step: the sweep's fastest kernel at the largest size, in the side's dtype.
    beside_kernels = {}
    for p in precisions:
        name = max(sweeps[p], key=sweeps[p].get)
        beside_kernels[p] = {name: matmul_kernels(DTYPES[p])[name]}
    times: dict[str, list[float]] = {p: [] for p in precisions}
    local_peaks: dict[str, list[float]] = {p: [] for p in precisions}
    for _ in range(args.repeats):
        for precision in precisions:  # interleaved: drift hits both sides
            set_compute_precision(model, precision)
            local_peaks[precision].append(
                max(
                    matmul_peak(
                        DTYPES[precision], repeats=3, sizes=(max(sizes),), kernels=beside_kernels[precision]
                    ).values()
                )
            )
            started = time.perf_counter()
            step()
            times[precision].append(time.perf_counter() - started)
    set_compute_precision(model, "fp32")

    result = {
        "model": args.model,
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "length": args.length,
        "checkpointing": args.checkpointing,
        "compile": args.compile,
        "linear_kernel": linear_kernel(model),
        "bf16_matmul_speedup": speedup,
        "flops_per_step": flops,
        "precisions": {},
    }
    for precision in precisions:
        seconds = statistics.median(times[precision])
        achieved = flops / seconds / 1e9
        fraction_beside = statistics.median(
            flops / t / 1e9 / p for t, p in zip(times[precision], local_peaks[precision])
        )
        peak = max(*sweeps[precision].values(), *local_peaks[precision])
        result["precisions"][precision] = {
            "seconds_per_step": seconds,
            "step_seconds": times[precision],
            "tokens_per_s": tokens / seconds,
            "achieved_gflops": achieved,
            "matmul_dtype": str(DTYPES[precision]).removeprefix("torch."),
            "matmul_peak_gflops": peak,
            "matmul_peak_by_kernel": sweeps[precision],
            "peaks_beside_steps_gflops": local_peaks[precision],
            "fraction_of_peak": achieved / peak,
            "fraction_of_peak_beside_step": fraction_beside,
        }
    for precision, r in result["precisions"].items():
        dtype, lows = r["matmul_dtype"], r["peaks_beside_steps_gflops"]
        by_kernel = ", ".join(f"{name} {value:.1f}" for name, value in r["matmul_peak_by_kernel"].items())
        step_times = r["step_seconds"]
        print(f"\n{precision}")
        print(
            f"  {dtype} matmul peak {r['matmul_peak_gflops']:8.1f} GFLOP/s (sweep: {by_kernel}; beside steps: {min(lows):.0f}-{max(lows):.0f})"
        )
        print(
            f"  fwd+bwd            {r['tokens_per_s']:8.1f} tokens/s  ({r['seconds_per_step']:.2f} s per {args.batch}x{args.length} batch, median of {args.repeats}: {min(step_times):.2f}-{max(step_times):.2f})"
        )
        print(
            f"  achieved           {r['achieved_gflops']:8.1f} GFLOP/s = {100 * r['fraction_of_peak_beside_step']:.0f}% of the {dtype} peak measured beside each step (median); {100 * r['fraction_of_peak']:.0f}% of the run's best {dtype} peak"
        )
    if len(precisions) == 2:
        fp32, bf16 = result["precisions"]["fp32"], result["precisions"]["bf16-mixed"]
        result["bf16_mixed_over_fp32"] = bf16["tokens_per_s"] / fp32["tokens_per_s"]
        print(
            f"\nbf16-mixed / fp32       {result['bf16_mixed_over_fp32']:8.2f}x tokens/s  (medians; bf16/fp32 matmul speed on this machine {speedup:.2f}x)"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()

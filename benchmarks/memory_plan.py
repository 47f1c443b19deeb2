"""The memory planner's estimate against a measured peak, one RL update micro-batch at a time.

    python benchmarks/memory_plan.py [--models tiny-random smollm2-135m] [--tokens 2048 8192]
                                     [--precision fp32 bf16-mixed] [--checkpointing off on]
                                     [--device cpu|cuda] [--json out.json]

Each case runs in a fresh subprocess: the model is loaded in float32 (the trainer's
masters), put in the case's compute precision, and one update runs as the trainer's does
(``training.logprobs.token_logprobs`` over a micro-batch of ``tokens`` tokens in rows of
512, a loss over every position, backward, a fused AdamW step, then a second update so the
optimizer state exists at the backward's peak). Measured: on CUDA the allocator's peak
(``torch.cuda.max_memory_allocated``) minus what was allocated before the model; on the
CPU the process's peak resident memory (VmHWM, reset before the model loads) minus its
resident memory at that point, with every block above 128 KB mapped on its own (what is
resident then follows the live tensors, within 2% between identical runs). The estimate is ``planning.plan_memory``'s update peak for
the same settings (single process, no KL reference, no critic). Prints the CPU model (and
GPU) with the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

ROW_TOKENS = 512


def measure(model_name: str, tokens: int, precision: str, checkpointing: bool, device: str) -> dict:
    import torch

    from agentic_rl.accel import resident_bytes
    from agentic_rl.models import load
    from agentic_rl.models.precision import set_compute_precision
    from agentic_rl.training.logprobs import token_logprobs
    from agentic_rl.training.optim import make_optimizer
    from agentic_rl.training.speed import apply_speed_options

    cuda = device == "cuda"
    load("tiny-random", device=device)  # imports and one-time setup are not the model's memory
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # resets VmHWM to the current resident size
        before = resident_bytes()
    model, _ = load(model_name, device=device)
    apply_speed_options(model, gradient_checkpointing=checkpointing)
    set_compute_precision(model, precision)
    model.train()
    optimizer = make_optimizer(model.parameters(), lr=1e-6)
    rows = max(tokens // ROW_TOKENS, 1)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, min(tokens, ROW_TOKENS)), generator=generator).to(device)
    mask = torch.ones_like(ids)
    for _ in range(2):
        logprobs, _ = token_logprobs(model, ids, mask, mask)
        (-logprobs.sum() / mask.sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if cuda:
        peak = torch.cuda.max_memory_allocated() - before
    else:
        with open("/proc/self/status") as handle:
            hwm = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM"))
        peak = hwm - before
    return {"measured_bytes": peak}


def estimate(model_name: str, tokens: int, precision: str, checkpointing: bool) -> float:
    from agentic_rl.planning.config_plan import shape_of
    from agentic_rl.planning.memory import PlanSettings, plan_memory

    settings = PlanSettings(precision=precision, gradient_checkpointing=checkpointing, micro_batch_tokens=tokens)
    return plan_memory(shape_of(model_name), settings).update_peak


def machine(device: str) -> str:
    import platform

    name = platform.processor()
    try:
        with open("/proc/cpuinfo") as handle:
            name = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), name)
    except OSError:
        pass
    if device == "cuda":
        import torch

        name += f"; GPU {torch.cuda.get_device_name()}"
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny-random", "smollm2-135m"])
    parser.add_argument("--tokens", nargs="+", type=int, default=[2048, 8192])
    parser.add_argument("--precision", nargs="+", default=["fp32"])
    parser.add_argument("--checkpointing", nargs="+", default=["off", "on"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one measurement, in a subprocess
    args = parser.parse_args()
    if args.case:
        model_name, tokens, precision, checkpointing = json.loads(args.case)
        print(json.dumps(measure(model_name, tokens, precision, checkpointing, args.device)))
        return
    print(f"machine: {machine(args.device)}", flush=True)
    print(
        f"{'model':<14} {'tokens':>6} {'precision':<10} {'ckpt':<4} {'measured GB':>11} {'planned GB':>10} {'planned/measured':>16}"
    )
    results = []
    for model_name, tokens, precision, checkpointing in itertools.product(
        args.models, args.tokens, args.precision, args.checkpointing
    ):
        case = [model_name, tokens, precision, checkpointing == "on"]
        # Every block above 128 KB its own mapping, unmapped when freed: the peak resident
        # size then follows the live tensors (the trainer's malloc tuning, and glibc's
        # moving mmap threshold, keep freed blocks resident: +-25% between identical runs).
        env = {
            **os.environ,
            "AGENTIC_RL_MALLOC_TUNING": "0",
            "MALLOC_MMAP_THRESHOLD_": "131072",
            "MALLOC_TRIM_THRESHOLD_": "131072",
        }
        out = subprocess.run(
            [sys.executable, __file__, "--device", args.device, "--case", json.dumps(case)],
            capture_output=True,
            text=True,
            env=env,
        )
        if out.returncode != 0:
            print(
                f"{model_name:<14} {tokens:>6} {precision:<10} {checkpointing:<4} failed: {out.stderr.strip().splitlines()[-1:]}"
            )
            continue
        measured = json.loads(out.stdout.strip().splitlines()[-1])["measured_bytes"]
        planned = estimate(*case)
        results.append(
            {
                "model": model_name,
                "tokens": tokens,
                "precision": precision,
                "checkpointing": checkpointing,
                "measured_bytes": measured,
                "planned_bytes": planned,
            }
        )
        print(
            f"{model_name:<14} {tokens:>6} {precision:<10} {checkpointing:<4} {measured / 1e9:>11.3f} {planned / 1e9:>10.3f} {planned / max(measured, 1):>16.2f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"machine": machine(args.device), "results": results}, handle, indent=2)


if __name__ == "__main__":
    main()

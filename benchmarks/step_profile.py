"""Where one GRPO step's time goes on this CPU: the step's phases and the operators inside.

    python benchmarks/step_profile.py [--model smollm2-135m] [--precision fp32] [--max-new-tokens 128]
        [--top 15] [--json out.json]

The workload is ``benchmarks/grpo_step.py``'s (2 prompts x 8 generations, at most
``--max-new-tokens`` new tokens, token-mean clipped loss, one optimizer step). One warm-up
step, then one step under ``torch.profiler`` (CPU activities). Printed: the CPU model and
flags, the step's phases as the trainer times them (rollout, update, weight sync), and the
``--top`` operators by self CPU time with their share of the profiled step, grouped into
matmuls, attention, elementwise/normalisation, sampling, optimizer and the rest (what is
left is Python and framework overhead: the step's wall time minus the operators' self
time). The profiler adds overhead of its own: compare shares, not the absolute seconds,
with ``grpo_step.py``'s unprofiled timings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_step import our_trainer  # noqa: E402 -- the same workload
from machine import cpu_description  # noqa: E402

GROUPS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "packed", "mkldnn"),
    "attention": ("attention", "sdpa", "aten::_scaled_dot_product", "decode_attention"),
    "sampling": ("multinomial", "topk", "sort", "softmax", "cumsum", "aten::argmax"),
    "optimizer": ("adam", "_foreach", "optimizer"),
    "elementwise/norm": ("aten::mul", "aten::add", "aten::silu", "rms", "aten::pow", "aten::rsqrt", "aten::mean"),
}


def group_of(name: str) -> str:
    lowered = name.lower()
    for group, needles in GROUPS.items():
        if any(needle in lowered for needle in needles):
            return group
    return "other operators"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16-mixed"))
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json")
    args = parser.parse_args()
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    trainer = our_trainer(args.model, args.precision, 2, args.max_new_tokens)
    trainer.step()  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        started = time.perf_counter()
        metrics, _ = trainer.step()
        wall = time.perf_counter() - started
    phases = {
        key: float(metrics[key]) for key in ("rollout_time_s", "update_time_s", "weight_sync_time_s") if key in metrics
    }
    print(f"profiled step: {wall:.2f} s wall; phases: " + ", ".join(f"{k[:-7]} {v:.2f} s" for k, v in phases.items()))
    events = [e for e in profile.key_averages() if e.self_cpu_time_total > 0]
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    total_self = sum(e.self_cpu_time_total for e in events) / 1e6
    groups: dict[str, float] = {}
    for event in events:
        groups[group_of(event.key)] = groups.get(group_of(event.key), 0.0) + event.self_cpu_time_total / 1e6
    # Threads overlap, so operator self time can exceed wall time; shares are of the operators' total.
    threads = torch.get_num_threads()
    print(
        f"operators: {total_self:.2f} s self CPU time in all (threads summed); at most {wall * threads:.2f} CPU-s were"
        f" available: {max(0.0, wall * threads - total_self):.2f} s went to Python, framework overhead, idle threads"
        " and kernels the profiler does not see (the native decode kernels)"
    )
    for group, seconds in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"  {group:<18} {seconds:7.2f} s  {100 * seconds / total_self:5.1f}%")
    print(f"top {args.top} operators by self CPU time:")
    for event in events[: args.top]:
        seconds = event.self_cpu_time_total / 1e6
        print(f"  {event.key:<40} {seconds:7.3f} s  {100 * seconds / total_self:5.1f}%  calls {event.count}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "cpu": cpu_description(),
                    "wall_s": wall,
                    "phases": phases,
                    "groups_s": groups,
                    "top": [(e.key, e.self_cpu_time_total / 1e6, e.count) for e in events[: args.top]],
                },
                handle,
                indent=2,
            )


if __name__ == "__main__":
    main()

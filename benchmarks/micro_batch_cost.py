"""The fixed cost of one more training micro-batch, in padded tokens, per compute precision.

    python benchmarks/micro_batch_cost.py [--model smollm2-135m] [--precision fp32 bf16-mixed]

For each precision: the seconds of one forward + backward of the trainer's log-prob pass
(``training.logprobs.token_logprobs``, with entropies, as the RL loss runs it) over a
1 x 48 batch and over a 16 x 180 batch (best of 3 after a warm-up); the per-token cost is
their difference over the token difference, the fixed cost the small batch's time less its
tokens. The fixed cost in tokens is what the length bucketing weighs one more micro-batch
at (``training.batch.MICRO_BATCH_OVERHEAD_TOKENS``); an 8 x 100 batch checks the model.
``--compare-attention``: the 16 x 180 batch also with the float32 training attention of
models/attention.py turned off (bf16 attention under bf16-mixed), rounds alternating.
"""

from __future__ import annotations

import argparse
import time

import torch
from machine import cpu_description


def seconds(model, rows: int, length: int, repeats: int = 3) -> float:
    from agentic_rl.training.logprobs import token_logprobs

    ids = torch.randint(0, 1000, (rows, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    select = mask.clone()
    select[:, : min(40, length - 1)] = 0  # the prompt
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        logprobs, _ = token_logprobs(model, ids, mask, select, with_entropy=True)
        logprobs.sum().backward()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16-mixed"])
    parser.add_argument("--compare-attention", action="store_true")
    args = parser.parse_args()
    from agentic_rl.models import load
    from agentic_rl.models.precision import set_compute_precision
    from agentic_rl.training.batch import micro_batch_overhead

    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    model, _ = load(args.model, device="cpu")
    model.train()
    for precision in args.precision:
        set_compute_precision(model, precision)
        seconds(model, 4, 100, repeats=2)  # warm-up
        small, large, check = seconds(model, 1, 48), seconds(model, 16, 180), seconds(model, 8, 100)
        per_token = (large - small) / (16 * 180 - 48)
        fixed = small - 48 * per_token
        print(
            f"{precision:>10}: 1x48 {small:.3f} s, 16x180 {large:.3f} s -> {1e3 * per_token:.2f} ms a token,"
            f" {fixed:.3f} s a micro-batch = {fixed / per_token:.0f} tokens (the trainer weighs"
            f" {micro_batch_overhead(precision)}); 8x100 {check:.3f} s, predicted {fixed + 800 * per_token:.3f} s"
        )
        if args.compare_attention:
            compare_attention(model, precision)


def compare_attention(model, precision: str, rounds: int = 3) -> None:
    from agentic_rl.models import attention

    routed = attention.float32_here
    times: dict[str, list[float]] = {"float32 attention": [], "transformers' attention": []}
    try:
        for _ in range(rounds):
            for name, choice in (("float32 attention", routed), ("transformers' attention", lambda query: False)):
                attention.float32_here = choice
                times[name].append(seconds(model, 16, 180, repeats=1))
    finally:
        attention.float32_here = routed
    print(f"{precision:>10}: 16x180 " + ", ".join(f"{k} {min(v):.3f} s" for k, v in times.items()))


if __name__ == "__main__":
    main()

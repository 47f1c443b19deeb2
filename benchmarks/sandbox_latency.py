"""Sandbox latency: p50/p95 of ``print(1)`` over warm-pool calls, and calls/s with N workers.

    python benchmarks/sandbox_latency.py [--calls 200] [--workers 2] [--rounds 3]

Each round makes ``--calls`` sequential calls (latency) and then ``--calls`` calls from
``--workers`` threads (throughput) on one warm pool. The load average is printed with the
numbers: on a shared machine other processes inflate both, so compare rounds taken under
similar load (the median round is the headline).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from agentic_rl import sandbox


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[round(fraction * (len(sorted_values) - 1))]


def one_round(pool: sandbox.SandboxPool, calls: int, workers: int) -> tuple[float, float, float, float]:
    """(p50 ms, p95 ms, max ms, calls/s) of one round."""
    latencies = []
    for _ in range(calls):
        start = time.perf_counter()
        result = pool.execute("print(1)", timeout_s=5)
        latencies.append((time.perf_counter() - start) * 1000)
        assert result.status == "ok" and result.stdout == "1\n", result
    latencies.sort()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as threads:
        results = list(threads.map(lambda _: pool.execute("print(1)", timeout_s=5), range(calls)))
    elapsed = time.perf_counter() - start
    assert all(r.status == "ok" and r.stdout == "1\n" for r in results)
    return statistics.median(latencies), percentile(latencies, 0.95), latencies[-1], calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"isolation: {sandbox.isolation().describe()}; {os.cpu_count()} CPUs, load average before: {os.getloadavg()[0]:.2f}"
    )
    rounds = []
    with sandbox.SandboxPool(size=args.workers) as pool:
        for _ in range(5):  # warm up
            pool.execute("print(1)")
        for index in range(args.rounds):
            p50, p95, worst, rate = one_round(pool, args.calls, args.workers)
            rounds.append((p50, p95, rate))
            print(
                f"round {index + 1}: {args.calls} sequential calls p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {worst:.2f} ms; {rate:.0f} calls/s with {args.workers} workers (load {os.getloadavg()[0]:.2f})"
            )
    p50, p95, rate = sorted(rounds)[len(rounds) // 2]
    print(f"median round: p50 {p50:.2f} ms, p95 {p95:.2f} ms, {rate:.0f} calls/s with {args.workers} workers")
    start = time.perf_counter()
    sandbox.execute("print(1)")
    print(f"one-shot execute (cold worker): {(time.perf_counter() - start) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

"""Sandbox latency: p50/p95 of ``print(1)`` over warm-pool calls, and calls/s with N workers.

    python benchmarks/sandbox_latency.py [--calls 200] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from agentic_rl import sandbox


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"isolation: {sandbox.isolation().describe()}")
    with sandbox.SandboxPool(size=args.workers) as pool:
        for _ in range(5):  # warm up
            pool.execute("print(1)")
        latencies = []
        for _ in range(args.calls):
            start = time.perf_counter()
            result = pool.execute("print(1)", timeout_s=5)
            latencies.append((time.perf_counter() - start) * 1000)
            assert result.status == "ok" and result.stdout == "1\n", result
        latencies.sort()
        p50 = statistics.median(latencies)
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        print(f"sequential, {args.calls} calls: p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {latencies[-1]:.2f} ms")
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.workers) as threads:
            results = list(threads.map(lambda _: pool.execute("print(1)", timeout_s=5), range(args.calls)))
        elapsed = time.perf_counter() - start
        assert all(r.status == "ok" for r in results)
        print(f"throughput with {args.workers} workers: {args.calls / elapsed:.0f} calls/s")
    start = time.perf_counter()
    sandbox.execute("print(1)")
    print(f"one-shot execute (cold worker): {(time.perf_counter() - start) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

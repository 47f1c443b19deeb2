"""Cost of ``math_equivalent`` on typical answers: ms per call over 1000 comparisons.

    python benchmarks/math_equivalent.py [--calls 1000] [--rounds 3]

"numeric" pairs are decided in process (numbers, identical strings) unless they differ;
"latex" pairs go to the math-verify worker process (one pipe round trip each). The
load average is printed: on a shared machine compare rounds taken under similar load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from agentic_rl.rewards import math_equivalent

NUMERIC = [("12", "12.0"), ("$1,234$", "1234"), ("72", "73"), ("3/4", "0.75"), ("7", "7")]
LATEX = [
    ("\\frac{1}{2}", "0.5"),
    ("x+1", "1+x"),
    ("\\frac{3}{4}", "0.75"),
    ("2\\pi", "\\pi*2"),
    ("\\frac{1}{3}", "0.5"),
]


def ms_per_call(pairs: list[tuple[str, str]], calls: int) -> float:
    start = time.perf_counter()
    for index in range(calls):
        math_equivalent(*pairs[index % len(pairs)])
    return 1e3 * (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    math_equivalent("\\frac{1}{2}", "0.5")  # warm-up: worker start, imports
    for label, pairs in (("numeric", NUMERIC), ("latex", LATEX), ("mixed", NUMERIC + LATEX)):
        rounds = [ms_per_call(pairs, args.calls) for _ in range(args.rounds)]
        print(
            f"{label:8s} median {statistics.median(rounds):.3f} ms/call (rounds: {', '.join(f'{r:.3f}' for r in rounds)}; load {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()

"""The math-verify worker process: ``python -m agentic_rl.rewards._math_worker``.

Reads one JSON request per line on stdin (``[prediction, gold]``) and answers ``1`` or
``0`` per line on its protocol descriptor. It runs apart from the trainer because
sympy can spend unbounded time and memory on a model's answer (``9^{9^{9^{9}}}``)
while holding the GIL; the parent enforces the deadline by killing this process.
Started by :class:`agentic_rl.rewards.math.MathVerifier`; not meant to be run by hand.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import threading
import time

CPU_SECONDS_PER_REQUEST = 5
"""SIGXCPU kills the worker past this much CPU on one request: a bound that holds even
if the parent died without killing it (the parent's deadline is much shorter)."""


def _watch_parent(parent: int) -> None:
    # stdin EOF ends an idle worker when the trainer exits; this covers a parent that
    # died while the worker was between reads of a partial line.
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


def main() -> None:
    # Keep the protocol on a private descriptor: library prints to stdout cannot corrupt it.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    memory_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        from math_verify import parse, verify
    except ImportError:
        protocol.write("unavailable\n")
        return
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # Warm up (grammar building, sympy caches) so the first real request meets its deadline.
    verify(parse("$\\frac{1}{2}$", parsing_timeout=None), parse("$x+0.5$", parsing_timeout=None), timeout_seconds=None)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU would otherwise dump core
    if memory_bytes > 0:
        # After the imports, so the cap bounds the work on answers, not sympy's import.
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    protocol.write("ready\n")
    for line in sys.stdin:
        try:
            used = resource.getrusage(resource.RUSAGE_SELF)
            hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
            soft = int(used.ru_utime + used.ru_stime) + CPU_SECONDS_PER_REQUEST
            resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
            prediction, gold = json.loads(line)
            # math-verify's own timeouts (SIGALRM) are off: the parent's deadline is the bound.
            gold_parsed = parse(f"${gold}$", parsing_timeout=None)
            predicted = parse(
                prediction if "$" in prediction or "\\" in prediction else f"${prediction}$", parsing_timeout=None
            )
            equal = bool(gold_parsed and predicted and verify(gold_parsed, predicted, timeout_seconds=None))
        except Exception:  # MemoryError (the RLIMIT_AS cap) included: not equivalent
            equal = False
        protocol.write("1\n" if equal else "0\n")


if __name__ == "__main__":
    main()

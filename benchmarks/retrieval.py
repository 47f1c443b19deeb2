"""Retrieval benchmark: BM25 index build time and query latency on generated documents.

    python benchmarks/retrieval.py [--num-docs 100000] [--num-queries 1000] [--k 3]

Generates ``--num-docs`` fictional-entity documents (the ``search-qa`` generator), builds
and saves a BM25 index, opens it memory-mapped, and times ``--num-queries`` single
queries (entity name + a fact word, like a searching agent writes) pinned to one CPU
core. Goal: p50 <= 5 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time

for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(variable, "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-docs", type=int, default=100_000)
    parser.add_argument("--num-queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    from agentic_rl.envs.search_data import generate_corpus
    from agentic_rl.retrieval import build_index, load_index

    started = time.perf_counter()
    docs = generate_corpus(args.num_docs, seed=args.seed)
    generate_s = time.perf_counter() - started
    rng = random.Random(args.seed)
    words = ["founded", "born", "headquarters", "produced", "designed", "city country", "career"]
    queries = [f"{doc.title.split(' (')[0]} {rng.choice(words)}" for doc in rng.choices(docs, k=args.num_queries)]

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        build_index(docs, folder)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        retriever = load_index(folder)
        load_s = time.perf_counter() - started
        for query in queries[:20]:  # warm up: page in the memory-mapped arrays
            retriever.search(query, args.k)
        latencies = []
        hits = 0
        for query in queries:
            started = time.perf_counter()
            results = retriever.search(query, args.k)
            latencies.append((time.perf_counter() - started) * 1000)
            hits += bool(results) and query.split()[0].lower() in results[0].title.lower()
        retriever.close()
    latencies.sort()
    report = {
        "num_docs": len(docs),
        "num_queries": len(queries),
        "k": args.k,
        "generate_s": round(generate_s, 2),
        "index_build_s": round(build_s, 2),
        "index_load_s": round(load_s, 3),
        "query_p50_ms": round(statistics.median(latencies), 3),
        "query_p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        "query_mean_ms": round(statistics.fmean(latencies), 3),
        "top1_title_match": round(hits / len(queries), 3),
        "goal_p50_ms": 5.0,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Multi-process training: step time and memory per rank for 1 process and for 2 ranks
under DDP and FSDP2 (torchrun, gloo on CPU), same global batch, same run.

    python benchmarks/distributed.py [--model smollm2-135m] [--steps 3] [--trajectories 16]
                                     [--length 256] [--json out.json]

Each configuration runs in its own processes (``--worker`` is the per-rank entry point):
the RL update (``RLTrainer.update``: one optimizer step over the global batch of
``--trajectories`` sequences of ``--length`` tokens, the second half of each sampled,
random tokens and advantages; no rollouts, which do not shard) is timed ``--steps``
times after a warm-up. Per rank it reports the median step seconds, the bytes of the
parameters and AdamW state that rank holds (FSDP2: its shards), and its peak resident
memory (which includes loading the full model before sharding). One process is the
reference; on a 2-core machine two ranks share the cores, so no speed-up is expected:
the figures show the overhead and the memory split.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def _local_bytes(tensors) -> int:
    total = 0
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total


def worker(args) -> None:
    from agentic_rl.config import TrainConfig
    from agentic_rl.distributed import init_distributed, shutdown
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.models import load
    from agentic_rl.training.rl import RLTrainer
    from agentic_rl.training.scoring import ScoredBatch
    from agentic_rl.types import Trajectory

    dist = init_distributed()
    config = TrainConfig.model_validate(
        {
            "model": {"name": args.model, "device": "cpu"},
            "precision": "fp32",
            "trainer": {"strategy": args.strategy},
            "rl": {"steps": args.steps + 1, "tasks_per_step": 1, "group_size": max(2, args.trajectories)},
            "checkpoint_every": 0,
            "rollout": {"max_total_tokens": args.length},
            "optim": {"lr": 1e-6},
            "algorithm": {"preset": "grpo-tcr"},
        }
    )
    model, tokenizer = load(args.model, device="cpu")
    backend = HFBackend(model, tokenizer, own_copy=args.strategy == "fsdp2")
    trainer = RLTrainer(config, model, tokenizer, backend, None, [0], dist=dist)
    generator = torch.Generator().manual_seed(0)
    half = args.length // 2
    trajectories, advantages = [], []
    for i in range(args.trajectories):
        ids = torch.randint(3, model.config.vocab_size, (args.length,), generator=generator).tolist()
        trajectories.append(
            Trajectory(
                task_id="0",
                group_id="g",
                token_ids=ids,
                loss_mask=[0] * half + [1] * (args.length - half),
                sampler_logprobs=[-10.8] * args.length,
            )
        )
        advantages.append([float(i % 2 * 2 - 1)] * args.length)
    scored = ScoredBatch(trajectories, torch.zeros(args.trajectories), advantages)
    times = []
    for _step in range(args.steps + 1):
        dist.barrier()
        started = time.perf_counter()
        trainer.update(scored)
        trainer.step_index += 1
        times.append(time.perf_counter() - started)
    state = [
        value
        for per_param in trainer.optimizer.state.values()
        for value in per_param.values()
        if torch.is_tensor(value) and value.dim()
    ]
    result = {
        "rank": dist.rank,
        "step_s": times[1:],
        "median_step_s": statistics.median(times[1:]),
        "parameter_bytes": _local_bytes(model.parameters()),
        "optimizer_bytes": _local_bytes(state),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    Path(args.out, f"rank{dist.rank}.json").write_text(json.dumps(result))
    shutdown()


def run(strategy: str, ranks: int, args) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        common = [
            __file__,
            "--worker",
            "--strategy",
            strategy,
            "--model",
            args.model,
            "--steps",
            str(args.steps),
            "--trajectories",
            str(args.trajectories),
            "--length",
            str(args.length),
            "--out",
            out,
        ]
        if ranks == 1:
            command = [sys.executable, *common]
        else:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={ranks}",
                *common,
            ]
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // ranks))}
        subprocess.run(command, check=True, env=env)
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(ranks)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="single", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    results = {}
    for strategy, ranks in (("single", 1), ("ddp", 2), ("fsdp2", 2)):
        results[f"{strategy}-{ranks}"] = run(strategy, ranks, args)
    single = results["single-1"][0]
    reference_state = single["parameter_bytes"] + single["optimizer_bytes"]
    print(f"{'config':>9} {'rank':>4} {'step s':>7} {'params+AdamW MB':>16} {'vs 1 proc':>9} {'peak RSS MB':>11}")
    for name, ranks in results.items():
        for rank in ranks:
            state = rank["parameter_bytes"] + rank["optimizer_bytes"]
            print(
                f"{name:>9} {rank['rank']:>4} {rank['median_step_s']:>7.2f} {state / 2**20:>16.1f} {state / reference_state:>8.2f}x {rank['peak_rss_bytes'] / 2**20:>11.0f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

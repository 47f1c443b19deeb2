"""Ray rollout workers, sync vs async, same run, same machine:

1. ``tail``: GRPO steps on an env whose step stands for a tool call of ``--step-s`` seconds,
   one episode in ten 5x slower (benchmarks/slow_tail_env.py), the tiny random model (so
   the env's latency, not compute, sets the pace). Sync mode waits for the slowest episode
   of every step; async mode (``max_staleness`` 1 and 2) takes groups as they finish and
   keeps sampling while the trainer updates. Reported: step time (mean over the steps after
   a warm-up), the mean and slowest episode time, staleness, groups dropped as stale.
2. ``throughput``: rollout tokens/s of the embedded model (arithmetic, sync mode) with 1
   rollout worker of 2 threads vs 2 workers of 1 thread each, and the in-process engine
   (2 threads) as the baseline, on one machine's cores.

    python benchmarks/async_rl.py [--part tail|throughput|all] [--steps 6] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path

HERE = Path(__file__).parent


def _config(rl=None, **overrides):
    from agentic_rl.config import TrainConfig

    data = {
        "model": {"name": "tiny-random", "device": "cpu"},
        "env": {"name": "slow_tail_env:SlowTailEnv"},
        "precision": "fp32",
        "rollout": {"max_new_tokens": 16, "max_total_tokens": 256},
        "rl": {"tasks_per_step": 4, "group_size": 4, **(rl or {})},
        "optim": {"lr": 1e-4},
    }
    data.update(overrides)
    return TrainConfig.model_validate(data)


def run_steps(config, model, tokenizer, steps: int) -> dict:
    from agentic_rl.distributed.ray_rollouts import RayRollouts
    from agentic_rl.envs.registry import env_factory
    from agentic_rl.training.rl import RLTrainer

    model = copy.deepcopy(model)
    rollouts = RayRollouts(config, model)
    rollouts.info()  # workers up before timing
    trainer = RLTrainer(
        config,
        model,
        tokenizer,
        rollouts,
        env_factory(config.env.name, config.env.options, split="train"),
        list(range(100_000)),
    )
    rows = []
    try:
        for _ in range(steps + 1):
            metrics, groups = trainer.step()
            episodes = [t.wall_time_s for g in groups for t in g.trajectories]
            rows.append({**metrics, "episode_mean_s": statistics.mean(episodes), "episode_max_s": max(episodes)})
    finally:
        trainer.close()
        rollouts.close()
    timed = rows[1:]  # the first step also waits for the workers' first batch
    summary = {
        "step_time_s": statistics.mean(r["step_time_s"] for r in timed),
        "update_time_s": statistics.mean(r["update_time_s"] for r in timed),
        "episode_mean_s": statistics.mean(r["episode_mean_s"] for r in timed),
        "episode_max_s": max(r["episode_max_s"] for r in timed),
    }
    for key in ("staleness_mean", "staleness_max", "stale_dropped", "rollout_wait_s", "groups_in_flight"):
        if key in timed[0]:
            summary[key] = statistics.mean(r[key] for r in timed)
    return summary


def tail(steps: int, step_s: float) -> dict:
    from agentic_rl.models import load

    model, tokenizer = load("tiny-random", device="cpu")
    env = {"name": "slow_tail_env:SlowTailEnv", "step_s": step_s}
    results = {}
    for label, distributed in (
        ("sync", {}),
        ("async, max_staleness 1", {"max_staleness": 1}),
        ("async, max_staleness 2", {"max_staleness": 2}),
    ):
        config = _config(env=env, distributed={"engine": "ray", "rollout_workers": 1, **distributed})
        results[label] = run_steps(config, model, tokenizer, steps)
        print(label, json.dumps({k: round(v, 3) for k, v in results[label].items()}), flush=True)
    return results


def throughput(steps: int) -> dict:
    import torch

    from agentic_rl import envs
    from agentic_rl.distributed.ray_rollouts import RayRollouts
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.models import load
    from agentic_rl.rollout.engine import rollout

    model, tokenizer = load("smollm2-135m", device="cpu")
    model = model.float()
    config = _config(
        model={"name": "smollm2-135m", "device": "cpu"},
        env={"name": "arithmetic"},
        rollout={"max_new_tokens": 64, "max_total_tokens": 1024},
        rl={"tasks_per_step": 8},
    )
    make_env = lambda: envs.make("arithmetic", split="train")  # noqa: E731
    results = {}

    def measure(label, sample):
        sample(0)  # warm-up
        rates = []
        for step in range(1, steps + 1):
            started = time.monotonic()
            groups = sample(step)
            rates.append(sum(t.response_tokens for g in groups for t in g.trajectories) / (time.monotonic() - started))
        results[label] = statistics.median(rates)
        print(label, f"{results[label]:.1f} tokens/s", flush=True)

    torch.set_num_threads(2)
    backend = HFBackend(model, tokenizer)
    measure(
        "in-process engine, 2 threads",
        lambda step: rollout(
            backend, make_env, list(range(step * 8, step * 8 + 8)), group_size=4, config=config.rollout, seed=step
        ),
    )
    for workers, cpus in ((1, 2.0), (2, 1.0)):
        ray_config = config.model_copy(
            update={
                "distributed": config.distributed.model_copy(
                    update={"engine": "ray", "rollout_workers": workers, "worker_cpus": cpus}
                )
            }
        )
        pool = RayRollouts(ray_config, model)
        pool.info()
        try:
            measure(
                f"{workers} rollout worker(s) x {int(cpus)} thread(s)",
                lambda step, pool=pool: pool.rollout(list(range(step * 8, step * 8 + 8)), group_size=4, seed=step),
            )
        finally:
            pool.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("tail", "throughput", "all"), default="all")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--step-s", type=float, default=0.5, help="the env step's latency (slow ones: 5x)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
        runtime_env={"env_vars": {"PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}},
    )
    import sys

    sys.path.insert(0, str(HERE))  # the driver builds the env once to validate it
    out = {}
    if args.part in ("tail", "all"):
        out["tail"] = tail(args.steps, args.step_s)
    if args.part in ("throughput", "all"):
        out["throughput"] = throughput(args.steps)
    ray.shutdown()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

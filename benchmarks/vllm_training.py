"""The vllm backend against the in-process hf engine, same run, same machine:

1. Greedy evaluation of the embedded model on ``--eval-tasks`` held-out arithmetic tasks
   (4 demonstrations in the prompt) with each backend: accuracy, and on how many tasks the
   two give the same final answer (the server samples in bf16, the hf engine in float32:
   a few near-ties may flip).
2. GRPO steps (arithmetic, ``--tasks-per-step`` x ``--group-size`` trajectories) with each
   backend: step time split into rollout, update and weight sync (the vllm backend writes
   the weights to tmpfs and has the server reload them), after one warm-up step each.

    python benchmarks/vllm_training.py --vllm .venv-vllm/bin/python [--eval-tasks 64]
                                       [--steps 2] [--json out.json]

The hf side runs in its best configuration on this machine (``precision: auto``); the
vLLM server with its defaults (compiled, prefix caching) in ``--vllm-dtype`` (auto, as
``backend.dtype``: bfloat16 where bf16 matmuls are fast, float32 where the CPU emulates them). The
server's startup is not timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def evaluate_with(backend, tasks: int) -> list:
    from agentic_rl.evaluation import evaluate

    result = evaluate(
        {
            "model": {"name": "smollm2-135m"},
            "env": {"name": "arithmetic", "few_shot": 4},
            "num_tasks": tasks,
            "num_samples": 1,
            "k": 1,
            "rollout": {"temperature": 0.0, "max_new_tokens": 128},
            "seed": 0,
        },
        backend=backend,
    )
    return [group.trajectories[0] for group in result.groups]


def grpo_steps(config, model, tokenizer, backend, steps: int) -> list[dict]:
    from agentic_rl import envs
    from agentic_rl.training.rl import RLTrainer

    trainer = RLTrainer(
        config, model, tokenizer, backend, lambda: envs.make("arithmetic", **config.env.options), list(range(1000))
    )
    trainer.step()  # warm-up
    return [trainer.step()[0] for _ in range(steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--vllm",
        required=True,
        metavar="PYTHON",
        help="the interpreter of the vLLM environment (make vllm: .venv-vllm/bin/python)",
    )
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--vllm-dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from agentic_rl.config import BackendConfig, TrainConfig
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.engines.remote import server_dtype
    from agentic_rl.engines.vllm import build_vllm_backend
    from agentic_rl.models import load
    from agentic_rl.models.precision import apply_precision

    model, tokenizer = load("smollm2-135m")
    precision = apply_precision(model, "auto")
    print(f"hf engine precision: {precision.precision} ({precision.reason})", flush=True)
    hf = HFBackend(model, tokenizer)
    dtype = server_dtype(args.vllm_dtype)  # the library's backend.dtype: auto
    print(f"starting the vLLM server in {dtype} (not timed) ...", flush=True)
    started = time.monotonic()
    vllm = build_vllm_backend(
        BackendConfig(kind="vllm", python=args.vllm, max_concurrency=64, dtype=dtype),
        "smollm2-135m",
        loaded=(model, tokenizer),
    )
    results: dict = {"server_startup_s": time.monotonic() - started, "vllm_dtype": dtype}

    answers = {}
    for name, backend in (("hf", hf), ("vllm", vllm)):
        began = time.monotonic()
        trajectories = evaluate_with(backend, args.eval_tasks)
        answers[name] = [t.answer for t in trajectories]
        results[f"eval_{name}"] = {
            "accuracy": statistics.mean(float(t.correct) for t in trajectories),
            "wall_s": time.monotonic() - began,
        }
    agree = sum(a == b for a, b in zip(answers["hf"], answers["vllm"]))
    results["eval_agreement"] = agree / args.eval_tasks
    print(
        f"\ngreedy eval, {args.eval_tasks} arithmetic tasks: hf accuracy {results['eval_hf']['accuracy']:.3f} ({results['eval_hf']['wall_s']:.0f} s), "
        f"vllm {results['eval_vllm']['accuracy']:.3f} ({results['eval_vllm']['wall_s']:.0f} s); same answer on {agree}/{args.eval_tasks} ({results['eval_agreement']:.0%})",
        flush=True,
    )

    base = {
        "model": {"name": "smollm2-135m"},
        "env": {"name": "arithmetic", "max_turns": 2},
        "rollout": {"max_new_tokens": 128, "max_total_tokens": 1024},
        "rl": {"steps": args.steps + 1, "tasks_per_step": args.tasks_per_step, "group_size": args.group_size},
        "optim": {"lr": 1e-6},
        "checkpoint_every": 0,
    }
    keys = ("step_time_s", "rollout_time_s", "update_time_s", "weight_sync_time_s", "tokens_per_s", "response_length")
    print(
        f"\nGRPO step, {args.tasks_per_step} tasks x {args.group_size} samples (mean of {args.steps} after a warm-up):"
    )
    print(f"{'backend':>8} " + " ".join(f"{k:>19}" for k in keys))
    for name, backend in (("hf", hf), ("vllm", vllm)):
        config = TrainConfig.model_validate({**base, "backend": {"kind": name}})
        steps = grpo_steps(config, model, tokenizer, backend, args.steps)
        row = {k: statistics.mean(s.get(k, 0.0) for s in steps) for k in keys}
        results[f"grpo_{name}"] = row
        print(f"{name:>8} " + " ".join(f"{row[k]:>19.2f}" for k in keys), flush=True)
    vllm.close()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()

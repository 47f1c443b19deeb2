"""Step time with a LoRA adapter per role vs one shared policy, on the same episodes.

    python benchmarks/role_adapters.py                          # the embedded SmolLM2-135M, 3 steps a side
    python benchmarks/role_adapters.py --model tiny-random --steps 2

The program is examples/multi_agent.py's planner and solver (two roles, calculator tool).
Side ``shared``: LoRA on, both roles train the one shared adapter. Side ``adapters``:
``lora.roles: {planner: own, solver: own}``, each role its own adapter (its own forward per
micro-batch, its own AdamW moments). LoRA's B starts at zero, so both sides start from the
base model and, with the same seed, sample the same first step's episodes: step 1 compares
the update on identical data; later steps sample from their own policies. Each side runs
in a fresh process-local load of the model, sides alternate in the order given. Prints the
CPU, each side's per-step rollout / update / step seconds, and the adapters/shared ratios
of step 1 and of the medians; ``--output`` writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_description  # noqa: E402

SIDES = {
    "shared": {"lora": {"enabled": True}},
    "adapters": {"lora": {"enabled": True, "roles": {"planner": "own", "solver": "own"}}},
}
TIMES = ("rollout_time_s", "update_time_s", "step_time_s")
SAMPLED = ("reward_mean", "response_length", "calls_per_episode")
"""What says the two sides' first steps sampled the same episodes."""


def run_side(name: str, args: argparse.Namespace) -> list[dict[str, float]]:
    """``args.steps`` RL steps of the planner/solver program with side ``name``'s LoRA config."""
    import multi_agent

    from agentic_rl import agents
    from agentic_rl.recipes import deep_merge

    config = deep_merge(
        {
            "model": {"name": args.model},
            # every sample through the forward and backward passes, whatever its advantage (the
            # base model's rewards are all 0: skipped, the update would time nothing)
            "rl": {
                "steps": args.steps,
                "tasks_per_step": args.tasks_per_step,
                "group_size": args.group_size,
                "skip_zero_advantage": False,
            },
            "rollout": {"max_new_tokens": 48, "max_total_tokens": 1024},
            "optim": {"lr": 1e-5},
            "seed": args.seed,
            "output_dir": f"{args.work_dir}/{name}",
        },
        SIDES[name],
    )
    steps: list[dict[str, float]] = []
    agents.train(
        multi_agent.agent, multi_agent.make_tasks(200, seed=0), multi_agent.reward, config, on_step=steps.append
    )
    return steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sides", default="shared,adapters", help="comma-separated, in run order")
    parser.add_argument("--work-dir", help="where the two runs go (default: a new temporary folder)")
    parser.add_argument("--output", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    args.work_dir = args.work_dir or tempfile.mkdtemp(prefix="role-adapters-")
    sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    unknown = [side for side in sides if side not in SIDES]
    if unknown:
        parser.error(f"--sides: unknown {', '.join(unknown)}; known: {', '.join(SIDES)}")
    print(f"cpu: {cpu_description()}", flush=True)
    results: dict[str, dict] = {}
    for side in sides:
        started = time.monotonic()
        steps = run_side(side, args)
        results[side] = {
            "steps": [{key: step[key] for key in (*TIMES, *SAMPLED) if key in step} for step in steps],
            **{f"median_{key}": statistics.median(step[key] for step in steps) for key in TIMES},
            "wall_s": time.monotonic() - started,
        }
        row = "  ".join(f"{key} {' '.join(f'{s[key]:.2f}' for s in steps)}" for key in TIMES)
        print(f"{side}: {row}", flush=True)
    if {"shared", "adapters"} <= set(results):
        shared, adapters = results["shared"], results["adapters"]
        ratios = {f"step1_{key}": adapters["steps"][0][key] / shared["steps"][0][key] for key in TIMES} | {
            f"median_{key}": adapters[f"median_{key}"] / shared[f"median_{key}"] for key in TIMES
        }
        results["adapters_over_shared"] = ratios
        print("adapters / shared: " + "  ".join(f"{key} {value:.2f}x" for key, value in ratios.items()))
    if args.output:
        Path(args.output).write_text(json.dumps({"cpu": cpu_description(), "args": vars(args), **results}, indent=2))


if __name__ == "__main__":
    main()

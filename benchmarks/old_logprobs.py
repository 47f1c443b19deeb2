"""The RL update with pre-update log-probs recomputed vs reused from the sampler
(``algorithm.old_logprobs``), same batch, same run.

    python benchmarks/old_logprobs.py --model runs/default-.../final [--repeats 3] [--json out.json]

Workload: the default demo's RL batch shape. One rollout step of the arithmetic words
task (4 tasks x 8 samples at temperature 1, fp32, in-process hf engine) is sampled once
with ``--model``: a cold-started one (a demo run's ``final/``), since the untrained
model solves nothing and a batch without reward variance has zero advantages, so
neither side would change a weight (the script reports the share of trajectories with a
non-zero advantage, and refuses a batch without any unless ``--allow-flat``); then the update of that one scored batch (GRPO-TCR, 2
mini-batches, so the second update's ratio needs pi_old) runs ``--repeats`` times per
side, alternating sides (drift hits both), each time from the same starting weights and
optimizer state. Reported: the median update seconds per side, the speed-up, and how
far the two sides' updated weights are apart (max |diff|), which should be float noise.
"""

from __future__ import annotations

import argparse

from update_sides import finish, time_update_sides


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--allow-flat", action="store_true", help="time a batch whose advantages are all zero (wiring checks)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from agentic_rl.config import TrainConfig
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.envs import env_factory
    from agentic_rl.models import load
    from agentic_rl.training.rl import RLTrainer

    model, tokenizer = load(args.model, device="cpu")
    model = model.float()
    env = env_factory("arithmetic", {"phrasing": "words", "operators": "-*", "max_turns": 3}, split="train")
    data = {
        "model": {"name": args.model},
        "env": {"name": "arithmetic", "phrasing": "words", "operators": "-*", "max_turns": 3},
        "rollout": {"temperature": 1.0, "max_new_tokens": 96, "max_total_tokens": 1024},
        "algorithm": {"preset": "grpo-tcr"},
        "optim": {"lr": 1e-5},
        "rl": {"steps": 1, "tasks_per_step": args.tasks, "group_size": args.group_size, "mini_batches": 2},
        "precision": "fp32",
    }
    trainers = {}
    for side in ("recompute", "sampler"):
        config = TrainConfig.model_validate({**data, "algorithm": {**data["algorithm"], "old_logprobs": side}})
        trainers[side] = RLTrainer(config, model, tokenizer, HFBackend(model, tokenizer), env, list(range(1000, 2000)))
    groups, kept, _ = trainers["recompute"]._sample()
    scored, _, _ = trainers["recompute"].score_groups(kept, groups)
    tokens = sum(len(t.token_ids) for t in scored.trajectories)
    moving = sum(any(value != 0.0 for value in row) for row in scored.advantages) / max(len(scored.advantages), 1)
    if not moving and not args.allow_flat:
        print(
            f"--model: {args.model} solved all or none of each task's samples: no advantage, no update to compare; pass a cold-started model (a demo run's final/)"
        )
        return 2
    times, medians, gap = time_update_sides(trainers, model, scored, args.repeats)
    result = {
        "batch": {
            "trajectories": len(scored.trajectories),
            "tokens": tokens,
            "mini_batches": 2,
            "nonzero_advantage_share": moving,
        },
        "update_s": times,
        "median_update_s": medians,
        "speedup": medians["recompute"] / medians["sampler"],
        "max_weight_diff": gap,
        "torch_threads": torch.get_num_threads(),
    }
    print(
        f"batch: {len(scored.trajectories)} trajectories, {tokens} tokens, 2 mini-batches, {moving:.0%} with a non-zero advantage"
    )
    for side, value in medians.items():
        print(f"old_logprobs {side:9s}: median update {value:.2f} s  ({', '.join(f'{t:.2f}' for t in times[side])})")
    return finish(result, args.json)


if __name__ == "__main__":
    raise SystemExit(main())

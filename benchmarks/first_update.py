"""The RL update recomputing pre-update log-probs for every row vs only for the rows the
updates after the first read (the first reads its own, ratio 1), same batch, same run.

    python benchmarks/first_update.py --model RUN/checkpoints/step-0/model [--recipe search-qa] [--repeats 3] [--json out.json]

Workload: one RL step of ``--recipe`` (default search-qa: 8 tasks x 8 episodes, GRPO-TCR,
the recipe's precision: bf16-mixed where the CPU has fast bf16, where
``old_logprobs: auto`` recomputes) sampled once with ``--model``, a cold-started model (a
run's SFT checkpoint or ``final/``: the untrained model solves nothing and there would be
no update), updated in ``--mini-batches`` mini-batches (default 2, as the recipes) of one
epoch. Both sides run ``old_logprobs: recompute``; the "every row" side is the
trainer as it was before the first update read its own log-probs (its pre-update pass
covers the first mini-batch too, whose ratio it then reads from it). The update of that
one scored batch runs ``--repeats`` times per side, alternating sides, each time from the
same weights and optimizer state. Reported: the median update seconds per side, the
speed-up and how far the two sides' updated weights are apart (max |diff|), which should
be bf16 noise.
"""

from __future__ import annotations

import argparse

from update_sides import finish, recipe_sides, time_update_sides


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", required=True, help="a cold-started model folder (a run's checkpoint model or final/)"
    )
    parser.add_argument("--recipe", default="search-qa")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="which step's tasks are sampled")
    parser.add_argument(
        "--mini-batches",
        type=int,
        default=2,
        help="updates per batch (one PPO epoch); the first needs no pre-update pass",
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--allow-flat", action="store_true", help="time a batch whose advantages are all zero (wiring checks)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.mini_batches < 2:
        print(f"--mini-batches: expected at least 2 (one update needs no pre-update pass), got {args.mini_batches}")
        return 2
    recompute = {"algorithm": {"old_logprobs": "recompute"}, "rl": {"mini_batches": args.mini_batches, "epochs": 1}}
    sides = {"every_row": recompute, "later_updates": recompute}
    model, trainers, scored, precision = recipe_sides(args.recipe, args.model, args.seed, sides)
    # The trainer before this change: its pre-update pass covered every row, the first update included.
    trainers["every_row"].updater._current_first = False
    moving = sum(any(value != 0.0 for value in row) for row in scored.advantages) / max(len(scored.advantages), 1)
    if not moving and not args.allow_flat:
        print(
            f"--model: {args.model} solved all or none of each task's samples: no advantage, no update to compare; pass a cold-started model"
        )
        return 2
    tokens = sum(len(t.token_ids) for t in scored.trajectories)
    times, medians, gap = time_update_sides(trainers, model, scored, args.repeats)
    result = {
        "recipe": args.recipe,
        "precision": precision,
        "batch": {
            "trajectories": len(scored.trajectories),
            "tokens": tokens,
            "mini_batches": args.mini_batches,
            "nonzero_advantage_share": moving,
        },
        "update_s": times,
        "median_update_s": medians,
        "speedup": medians["every_row"] / medians["later_updates"],
        "max_weight_diff": gap,
        "torch_threads": torch.get_num_threads(),
    }
    print(
        f"batch: {len(scored.trajectories)} trajectories, {tokens} tokens ({precision}), {moving:.0%} with a non-zero advantage"
    )
    for side, value in medians.items():
        print(
            f"pre-update pass over {side:13s}: median update {value:.2f} s  ({', '.join(f'{t:.2f}' for t in times[side])})"
        )
    return finish(result, args.json)


if __name__ == "__main__":
    raise SystemExit(main())

"""The RL update with all-zero-advantage trajectories skipped vs forwarded
(``rl.skip_zero_advantage``), same batch, same run.

    python benchmarks/zero_advantage.py --model RUN/checkpoints/step-0/model [--recipe search-qa] [--repeats 3] [--json out.json]

Workload: one RL step of ``--recipe`` (default search-qa: 8 tasks x 8 episodes, GRPO-TCR,
2 mini-batches, the recipe's precision) sampled once with ``--model``, a cold-started
model (a run's SFT checkpoint or ``final/``): the untrained model solves nothing, so every
group would score alike and there would be nothing to compare. The update of that one
scored batch then runs ``--repeats`` times per side, alternating sides (drift hits both),
each time from the same weights and optimizer state. Reported: the share of trajectories
with a non-zero advantage (what the skipping side forwards), the median update seconds per
side, the speed-up, and how far the two sides' updated weights are apart (max |diff|),
which should be float noise.
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
    parser.add_argument("--json", help="write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    model, trainers, scored, precision = recipe_sides(
        args.recipe,
        args.model,
        args.seed,
        {False: {"rl": {"skip_zero_advantage": False}}, True: {"rl": {"skip_zero_advantage": True}}},
    )
    assert trainers[True].skip_zero_advantage, (
        "the recipe's algorithm reads zero-advantage trajectories: nothing to skip"
    )
    tokens = sum(len(t.token_ids) for t in scored.trajectories)
    # what the skipping side forwards: a non-zero advantage on some sampled token
    moving = [
        any(a != 0.0 for a, m in zip(row, t.loss_mask) if m) for t, row in zip(scored.trajectories, scored.advantages)
    ]
    share = sum(moving) / max(len(moving), 1)
    trained_tokens = sum(len(t.token_ids) for t, m in zip(scored.trajectories, moving) if m)
    if not any(moving):
        print(
            f"--model: {args.model} solved all or none of each task's samples: no advantage, nothing to compare; pass a cold-started model"
        )
        return 2
    times, medians, gap = time_update_sides(trainers, model, scored, args.repeats)
    result = {
        "recipe": args.recipe,
        "precision": precision,
        "batch": {
            "trajectories": len(scored.trajectories),
            "tokens": tokens,
            "nonzero_advantage_share": share,
            "nonzero_advantage_tokens": trained_tokens,
        },
        "update_s": {"forward_all": times[False], "skip_zero": times[True]},
        "median_update_s": {"forward_all": medians[False], "skip_zero": medians[True]},
        "speedup": medians[False] / medians[True],
        "max_weight_diff": gap,
        "torch_threads": torch.get_num_threads(),
    }
    print(
        f"batch: {len(scored.trajectories)} trajectories, {tokens} tokens ({precision}); {share:.0%} of them ({trained_tokens} tokens) with a non-zero advantage"
    )
    for side, label in ((False, "forward all"), (True, "skip zero  ")):
        print(f"{label}: median update {medians[side]:.2f} s  ({', '.join(f'{t:.2f}' for t in times[side])})")
    return finish(result, args.json)


if __name__ == "__main__":
    raise SystemExit(main())

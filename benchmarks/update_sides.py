"""Shared by the update benchmarks (old_logprobs.py, zero_advantage.py): time one scored
batch's RL update under each side's trainer, sides alternating, every run from the same
weights and optimizer state."""

from __future__ import annotations

import copy
import json
import statistics
import time


def time_update_sides(trainers: dict, model, scored, repeats: int) -> tuple[dict, dict, float]:
    """``trainers``: side -> RLTrainer, all over ``model``. Returns (update seconds per side,
    their medians, the largest |difference| between any two sides' updated weights)."""
    start = copy.deepcopy(model.state_dict())
    first = next(iter(trainers.values()))
    optimizer_state = copy.deepcopy(first.optimizer.state_dict())
    scheduler_state = copy.deepcopy(first.scheduler.state_dict())
    times: dict = {side: [] for side in trainers}
    after: dict = {}
    for _ in range(repeats):
        for side, trainer in trainers.items():
            model.load_state_dict(start)
            trainer.optimizer.load_state_dict(optimizer_state)
            trainer.scheduler.load_state_dict(scheduler_state)
            began = time.perf_counter()
            trainer.update(scored)
            times[side].append(time.perf_counter() - began)
            after[side] = {name: value.detach().clone() for name, value in model.state_dict().items()}
    sides = list(after)
    gap = max(float((after[a][name] - after[b][name]).abs().max()) for a in sides for b in sides if a != b for name in after[a])
    return times, {side: statistics.median(values) for side, values in times.items()}, gap


def finish(result: dict, json_path: str | None) -> int:
    """Print the speed-up line of ``result`` and write it to ``json_path`` (when given)."""
    print(f"speed-up {result['speedup']:.2f}x; updated weights differ by at most {result['max_weight_diff']:.2e}")
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0

"""Shared by the update benchmarks (old_logprobs.py, zero_advantage.py, first_update.py):
one recipe's scored RL batch with a trainer per side, and the timing of its update under
each side's trainer, sides alternating, every run from the same weights and optimizer state."""

from __future__ import annotations

import copy
import json
import statistics
import time


def recipe_sides(recipe_name: str, model_path: str, seed: int, sides: dict[str, dict]):
    """One RL step of ``recipe_name`` sampled once with the model at ``model_path`` (loaded
    in fp32, the recipe's precision applied) and scored, and one RLTrainer per side, each
    built from the recipe with that side's config overrides (deep-merged: ``{"rl":
    {"mini_batches": 4}}`` keeps the recipe's other ``rl`` keys). Returns (model, trainers,
    scored batch, precision)."""
    from agentic_rl.config import TrainConfig, build
    from agentic_rl.engines.factory import build_backend
    from agentic_rl.envs import env_factory
    from agentic_rl.models import load
    from agentic_rl.models.precision import apply_precision
    from agentic_rl.recipes import deep_merge, load_recipe
    from agentic_rl.training.rl import RLTrainer

    recipe = load_recipe(recipe_name)[1]
    recipe.update(model={**recipe.get("model", {}), "name": model_path, "device": "cpu"}, seed=seed)
    model, tokenizer = load(model_path, device="cpu")
    model = model.float()
    config = build(TrainConfig, recipe)
    precision = apply_precision(model, config.precision).precision
    env = env_factory(config.env.name, config.env.options, split="train")
    tasks = list(range(config.rl.task_offset, env().num_tasks))
    trainers = {}
    for side, overrides in sides.items():
        side_config = build(TrainConfig, deep_merge(recipe, overrides))
        backend = build_backend(side_config.backend, side_config.model, loaded=(model, tokenizer), precision=precision)
        trainers[side] = RLTrainer(side_config, model, tokenizer, backend, env, tasks)
    first = next(iter(trainers.values()))
    groups, kept, _ = first._sample()
    scored, _, _ = first.score_groups(kept, groups)
    return model, trainers, scored, precision


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
    gap = max(
        float((after[a][name] - after[b][name]).abs().max())
        for a in sides
        for b in sides
        if a != b
        for name in after[a]
    )
    return times, {side: statistics.median(values) for side, values in times.items()}, gap


def finish(result: dict, json_path: str | None) -> int:
    """Print the speed-up line of ``result`` and write it to ``json_path`` (when given)."""
    print(f"speed-up {result['speedup']:.2f}x; updated weights differ by at most {result['max_weight_diff']:.2e}")
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0

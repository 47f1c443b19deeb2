"""Which settings an agent program's training uses: every key of a ``TrainConfig`` that
differs from its default is honoured or refused with one line, never silently ignored."""

from __future__ import annotations

from typing import Any

from agentic_rl.config import ConfigError, TrainConfig

_ROLLOUT_KEYS = ("max_new_tokens", "max_total_tokens", "timeout_s", "temperature", "top_p")
_HONOURED = (
    *("description", "model.name", "model.device", "algorithm.", "reward.", "optim.", "trainer.", "tracking.sinks"),
    "lora.",
    *("rl.steps", "rl.tasks_per_step", "rl.group_size", "rl.epochs", "rl.mini_batches", "rl.micro_batch_tokens"),
    *("rl.skip_zero_advantage", "rl.max_generation_rounds", "rl.max_failed_fraction", "rl.max_nonfinite_steps"),
    *("precision", "gradient_checkpointing", "compile", "seed", "checkpoint_every", "keep_checkpoints", "output_dir"),
    *("backend.batch_size", *(f"rollout.{key}" for key in _ROLLOUT_KEYS)),
)
"""Dotted keys (or prefixes) that ``agents.train`` uses; any other key set away from its default is refused."""
_WHY = {
    "rl.sampling": "the agent program makes its own calls through the gateway",
    "rl.arpo": "ARPO branches an env's episodes; an agent program's episodes are its own",
    "backend": "the in-process engine serves the policy; only backend.batch_size applies",
    "distributed": "train-agent runs in one process",
    "env": "an agent program has no env: its tasks come from --tasks",
    "eval": "held-out tasks come from --eval-tasks",
    "rollout": "the agent program runs its own turns; max_new_tokens, max_total_tokens, timeout_s, temperature, top_p apply",
}
_REFUSED = {
    "reward.terms": "they weigh the terms an env reports; an agent program has none: score in reward(result, task)"
}
"""Keys under an honoured prefix that an agent program cannot use, and why."""


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) and value else {f"{prefix}{key}": value})
    return out


def refuse_ignored(config: TrainConfig) -> None:
    """ConfigError (one line) for the first setting an agent program's training would not
    use (``backend.kind``, ``lora.*``, ``distributed.*``, ``rl.sampling``, ``env.*``, ...):
    every key that differs from its default is honoured or refused, never silently ignored."""
    defaults = _flat(TrainConfig().model_dump())
    for key, value in _flat(config.model_dump()).items():
        refused = next((why for prefix, why in _REFUSED.items() if key == prefix or key.startswith(prefix + ".")), None)
        if refused and value != defaults.get(key, None):
            raise ConfigError(f"{key}: train-agent does not use it ({refused}); leave it out")
        if value == defaults.get(key, value) or key.startswith(_HONOURED):
            continue
        why = next((why for prefix, why in _WHY.items() if key == prefix or key.startswith(prefix + ".")), None)
        raise ConfigError(f"{key}: train-agent does not use it ({why or 'env-based training only'}); leave it out")

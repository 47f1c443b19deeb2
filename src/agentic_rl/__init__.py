"""agentic-rl: reinforcement learning for tool-using LLM agents.

The names a first program needs are here (``from agentic_rl import train, ToolEnv, Task,
tool``); they import their modules on first use, so ``import agentic_rl`` stays light."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

_LAZY = {
    "TrainConfig": "agentic_rl.config",
    "EvalConfig": "agentic_rl.config",
    "Env": "agentic_rl.envs",
    "Task": "agentic_rl.envs",
    "ToolEnv": "agentic_rl.envs",
    "register_env": ("agentic_rl.envs", "register"),
    "tool": "agentic_rl.tools",
    "ToolRegistry": "agentic_rl.tools",
}
__all__ = ["__version__", "evaluate", "train", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'agentic_rl' has no attribute {name!r}")
    module, attribute = _LAZY[name] if isinstance(_LAZY[name], tuple) else (_LAZY[name], name)
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def train(config=None, **kwargs):
    """Run a training job (see ``agentic_rl.training.pipeline.train``); mirrors ``agentic-rl train``.
    ``env=`` takes the env to train on as a name, an import path or its factory."""
    from agentic_rl.training.pipeline import train as _train

    return _train(config, **kwargs)


def evaluate(config=None, **kwargs):
    """Evaluate a policy (see ``agentic_rl.evaluation.evaluate``); mirrors ``agentic-rl eval``."""
    from agentic_rl.evaluation.harness import evaluate as _evaluate

    return _evaluate(config, **kwargs)

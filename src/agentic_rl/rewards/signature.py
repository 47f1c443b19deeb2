"""One argument order for every reward function a user writes: ``reward(answer, task)``
(the env's ``ToolEnv(reward_fn=...)`` and ``agents.train(reward=...)`` alike). A function
whose parameters say the other order is refused with one line, not called with its
arguments swapped."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_TASK = ("task", "tasks", "item", "example", "sample")
_ANSWER = ("answer", "result", "response", "completion", "output", "prediction", "reply")


def check_reward_order(fn: Callable[..., Any], what: str = "reward") -> None:
    """TypeError when ``fn``'s first two parameters are named task-then-answer (e.g.
    ``(task, answer)``): it is called as ``fn(answer, task)``."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return  # a builtin or a callable without a signature: nothing to read
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:2]
    if len(names) == 2 and names[0] in _TASK and names[1] in _ANSWER:
        raise TypeError(
            f"{what}: reward functions are called as {what}(answer, task) (since agentic-rl 0.2, everywhere); "
            f"this one takes ({names[0]}, {names[1]}): swap its parameters"
        )

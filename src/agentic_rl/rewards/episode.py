"""Episode-level reward terms computed from a finished trajectory, for any env: the format
reward, per-call tool costs and R1-Searcher's two-stage schedule.

They are pure functions of the trajectory (and the training step, for the schedule); the
trainer adds them to the env's outcome reward (``training.scoring.shaped_rewards``, under
the ``reward`` config section), so every advantage estimator sees them.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentic_rl.types import Trajectory

__all__ = ["format_ok", "retrieval_calls", "tool_cost", "two_stage_reward"]

ANY_TOOL = "*"
"""The ``tool_costs`` key whose cost applies to every tool not named."""


def format_ok(trajectory: Trajectory) -> bool:
    """Whether the episode followed its env's format.

    The env's own verdict when it gives one (``info["format_ok"]`` on its steps, all of
    which must say true: e.g. a text game's every action parsed, search-qa's answer after a
    search that ran); otherwise: the episode ended with an answer the env read
    (``termination_reason == "answered"`` and an answer) and no tool call was malformed.
    """
    if "format_ok" in trajectory.info:
        return bool(trajectory.info["format_ok"])
    answered = trajectory.termination_reason == "answered" and trajectory.answer is not None
    return answered and not any(result.malformed for result in trajectory.tool_results)


def tool_cost(trajectory: Trajectory, costs: Mapping[str, float]) -> float:
    """The summed cost of the episode's tool calls: ``costs[name]`` per call of tool
    ``name``, ``costs["*"]`` for a tool not named (a malformed call counts under "*")."""
    if not costs:
        return 0.0
    default = float(costs.get(ANY_TOOL, 0.0))
    return sum(float(costs.get(result.name, default)) for result in trajectory.tool_results)


def retrieval_calls(trajectory: Trajectory, tool: str) -> int:
    """Calls of ``tool`` in the episode that ran (``ok``)."""
    return sum(1 for result in trajectory.tool_results if result.name == tool and result.ok)


def two_stage_reward(
    outcome: float,
    *,
    step: int,
    switch_step: int,
    formatted: bool,
    retrieved: bool,
    retrieval_reward: float = 0.5,
    format_reward: float = 0.5,
    format_penalty: float = 2.0,
) -> float:
    """R1-Searcher's two-stage reward.

    Stage 1 (``step < switch_step``): learn to retrieve and to follow the format, whatever
    the answer: ``retrieval_reward * retrieved + format_reward * formatted``. Stage 2: the
    answer counts: ``outcome`` (the env's reward, e.g. F1), minus ``format_penalty`` when
    the format was broken (the paper: 0.5 / 0.5, then F1 and -2).
    """
    if step < switch_step:
        return retrieval_reward * float(retrieved) + format_reward * float(formatted)
    return outcome - (0.0 if formatted else format_penalty)

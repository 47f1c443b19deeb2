"""One argument order for user reward functions: ``reward(answer, task)``."""

from __future__ import annotations

import pytest

from agentic_rl import Task, ToolEnv
from agentic_rl.rewards.signature import check_reward_order


def answer_first(answer, task):
    return 1.0


def task_first(task, answer):
    return 1.0


def test_task_first_functions_are_refused_naming_the_order() -> None:
    check_reward_order(answer_first)
    check_reward_order(lambda a, t: 1.0)  # names that say nothing: taken as given
    check_reward_order(len)  # a builtin
    with pytest.raises(
        TypeError, match=r"^reward: reward functions are called as reward\(answer, task\) .* \(task, answer\)"
    ):
        check_reward_order(task_first)
    with pytest.raises(TypeError, match=r"takes \(task, result\)"):
        check_reward_order(lambda task, result: 0.0)


def test_tool_env_and_agent_training_check_it() -> None:
    tasks = [Task(id="t", prompt="p", answer="1")]
    ToolEnv(tasks, [], reward_fn=answer_first)
    with pytest.raises(TypeError, match=r"^reward_fn: "):
        ToolEnv(tasks, [], reward_fn=task_first)
    from agentic_rl.gateway.agent_training import AgentSampler

    with pytest.raises(TypeError, match=r"^reward: "):
        AgentSampler(None, lambda task, client: None, [{"id": "t"}], reward=task_first)

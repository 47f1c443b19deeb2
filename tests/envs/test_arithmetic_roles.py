"""The two built-in envs with roles, step by step: arithmetic-team (planner, solver) and
arithmetic-verify (solver, verifier)."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.arithmetic_team import planned_expression
from agentic_rl.envs.arithmetic_verify import verdict_reward
from agentic_rl.envs.base import check_env
from agentic_rl.types import Task


def say(text: str) -> dict:
    return {"role": "assistant", "content": text}


def call(expression: str) -> str:
    return (
        "<tool_call>\n" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "\n</tool_call>"
    )


@pytest.mark.parametrize("name", ["arithmetic-team", "arithmetic-verify"])
def test_the_env_contract_holds(name) -> None:
    check_env(make(name))


@pytest.mark.parametrize(
    ("reply", "expression"),
    [
        ("(820 - 541) * 103", "(820 - 541) * 103"),
        ("```\n3 * 4 =\n```", "3 * 4"),
        ("\n  12 + 7\nbecause...", "12 + 7"),
        ("The answer is 12", None),
        ("", None),
        ("(+)", None),
    ],
)
def test_the_planner_reply_is_its_first_line_when_that_is_an_expression(reply, expression) -> None:
    assert planned_expression(reply) == expression


def test_team_role_credit_step_by_step() -> None:
    env = make("arithmetic-team", operators="-")
    messages, info = env.reset(options={"task_index": 0})
    assert info["role"] == "planner" and messages[-1]["content"].startswith("Start with")
    expression = env.task.metadata["expression"]
    opening, reward, done, _, info = env.step(say(expression))
    assert (reward, done, info["role"], info["role_rewards"]) == (0.0, False, "solver", {"planner": 1.0})
    assert opening[-1]["content"] == f"What is {expression}?" and info["tools"]
    _, reward, done, _, info = env.step(say(call(expression)))
    assert (reward, done, info["role"]) == (0.0, False, "solver")
    _, reward, done, _, info = env.step(say(f"<answer>{env.task.answer}</answer>"))
    assert (reward, done, info["role_rewards"], info["correct"]) == (1.0, True, {"planner": 0.0}, True)
    assert env.episode_metrics()["team_correct"] == 1.0


def test_team_a_wrong_plan_solved_right_is_the_solvers_success_only() -> None:
    for credit, expected in (("role", (0.0, 1.0)), ("shared", (0.0, 0.0))):
        env = make("arithmetic-team", credit=credit)
        env.reset(options={"task_index": 1})
        _, _, _, _, info = env.step(say("2 + 3"))
        planner = info.get("role_rewards", {}).get("planner", 0.0)
        _, reward, done, _, info = env.step(say("<answer>5</answer>"))
        assert done and (planner, reward) == expected and not info["correct"]


def test_team_a_reply_that_is_no_expression_ends_the_episode() -> None:
    env = make("arithmetic-team")
    env.reset(options={"task_index": 0})
    observations, reward, done, _, info = env.step(say("Let me think."))
    assert (observations, reward, done, info["plan_ok"]) == ([], 0.0, True, False)
    assert env.episode_metrics() == {"team_correct": 0.0}


def test_verify_rewards_each_role_for_its_own_job() -> None:
    env = make("arithmetic-verify", shown="solver")
    env.reset(options={"task_index": 2})
    task = env.task
    _, reward, done, _, info = env.step(say(f"<answer>{int(task.answer) + 1}</answer>"))  # the solver is wrong
    assert (reward, done, info["role"], info["role_rewards"]) == (
        0.0,
        False,
        "verifier",
        {"solver": 0.0, "verifier": 0.0},
    )
    _, _, _, _, _ = env.step(say(call(task.metadata["expression"])))
    _, reward, done, _, info = env.step(say("<answer>wrong</answer>"))  # caught
    assert (reward, done, info["role_rewards"]) == (1.0, True, {"solver": 0.0})
    assert env.episode_metrics() == {
        "solver_correct": 0.0,
        "verdict_correct": 1.0,
        "shown_wrong": 1.0,
        "verdict_on_wrong": 1.0,
    }


def shown_to_verifier(index: int, solver_right: bool, shown: str = "balanced") -> tuple[str, str]:
    """(the proposed answer the verifier gets, the task's answer) after a right or wrong solver."""
    env = make("arithmetic-verify", shown=shown)
    env.reset(options={"task_index": index})
    given = env.task.answer if solver_right else str(int(env.task.answer) + 7)
    opening, _, _, _, info = env.step(say(f"<answer>{given}</answer>"))
    assert info["role_rewards"]["solver"] == float(solver_right)  # the solver's reward is its own answer's
    return opening[-1]["content"].split("Proposed answer: ")[1].split("\n")[0], env.task.answer


def test_balanced_shows_a_right_answer_on_half_of_the_tasks_whatever_the_solver_did() -> None:
    right = []
    for index in range(40):
        after_right, answer = shown_to_verifier(index, True)
        after_wrong, _ = shown_to_verifier(index, False)
        assert after_right == shown_to_verifier(index, True)[0]  # drawn from the task: the same every run
        right.append(after_right == answer)
        assert (after_wrong == answer) == (after_right == answer)  # the task decides, not the solver
        if after_wrong != answer:
            assert after_wrong == str(int(answer) + 7)  # a wrong solver's own answer
    assert 12 <= sum(right) <= 28
    assert shown_to_verifier(3, True, "solver") == (shown_to_verifier(3, True, "solver")[1],) * 2


def test_verdicts_and_options() -> None:
    task = Task(id="t", prompt="", answer="wrong")
    assert (
        verdict_reward(" Wrong ", task) == 1.0
        and verdict_reward("correct", task) == 0.0
        and verdict_reward(None, task) == 0.0
    )
    with pytest.raises(ValueError, match="shown"):
        make("arithmetic-verify", shown="both")
    with pytest.raises(ValueError, match="credit"):
        make("arithmetic-team", credit="everyone")

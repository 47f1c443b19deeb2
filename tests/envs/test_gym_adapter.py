"""The gymnasium adapter: the Env contract, transitions equal Gymnasium's own, named actions,
a custom observation formatter, and clear errors for bad options or a missing gymnasium."""

from __future__ import annotations

import builtins

import pytest

gymnasium = pytest.importorskip("gymnasium")

from agentic_rl.envs import check_env, make
from agentic_rl.envs.gym_adapter import plain_text

ACTIONS = ["Left", "Down", "Right", "Up"]
OPTIONS = {"env_id": "FrozenLake-v1", "env_kwargs": {"is_slippery": False}, "actions": ACTIONS}


def state_text(observation, env) -> str:
    """A formatter importable as tests.envs.test_gym_adapter:state_text."""
    return f"state {observation}"


def test_check_env_passes() -> None:
    check_env(make("gymnasium", **OPTIONS))


@pytest.mark.parametrize("moves", [[1, 1, 2, 2, 1, 2], [2, 2, 1, 0, 3, 3, 1, 1, 1, 2], [1, 2]])
def test_transitions_equal_gymnasiums(moves) -> None:
    env = make("gymnasium", **OPTIONS)
    reference = gymnasium.make("FrozenLake-v1", is_slippery=False, render_mode="ansi")
    messages, _ = env.reset(options={"task_index": 3})
    reference.reset(seed=3)
    assert plain_text(reference.render()).strip("\n") in messages[-1]["content"]
    for action in moves:
        observations, reward, terminated, truncated, info = env.step(
            {"role": "assistant", "content": f"<answer>{ACTIONS[action].upper()}</answer>"}
        )
        _, expected_reward, expected_terminated, expected_truncated, _ = reference.step(action)
        assert (reward, terminated, truncated) == (expected_reward, expected_terminated, expected_truncated)
        assert info["answer"] == ACTIONS[action] and info["correct"] == (terminated and reward > 0)
        if terminated or truncated:
            assert observations == []
            break
        assert plain_text(reference.render()).strip("\n") in observations[0]["content"]
    assert env.episode_metrics()["gym/steps"] >= 1


def test_the_goal_path_scores_one_and_a_hole_zero() -> None:
    env = make("gymnasium", **OPTIONS)
    env.reset(options={"task_index": 0})
    total = sum(
        env.step({"role": "assistant", "content": f"<answer>{a}</answer>"})[1]
        for a in ["Down", "Down", "Right", "Right", "Down", "Right"]
    )
    assert total == 1.0 and env.episode_metrics()["gym/success"] == 1.0
    env.reset(options={"task_index": 0})
    _, reward, terminated, _, info = env.step({"role": "assistant", "content": "<answer>Right</answer>"})
    _, reward, terminated, _, info = env.step(
        {"role": "assistant", "content": "<answer>Down</answer>"}
    )  # the hole at (1, 1)
    assert (reward, terminated, info["correct"]) == (0.0, True, False)


def test_player_is_visible_without_terminal_colours() -> None:
    messages, _ = make("gymnasium", **OPTIONS).reset(options={"task_index": 0})
    assert "\x1b" not in messages[-1]["content"] and messages[-1]["content"].startswith("[S]FFF")


def test_invalid_action_is_penalised_and_leaves_the_env_alone() -> None:
    env = make("gymnasium", **OPTIONS, max_turns=2)
    env.reset(options={"task_index": 0})
    observations, reward, terminated, truncated, info = env.step(
        {"role": "assistant", "content": "<answer>Jump</answer>"}
    )
    # The invalid reply is the ``invalid`` turn term (reward.terms weighs it), not a process reward.
    assert (reward, terminated, truncated, info["turn_reward"], info["turn_terms"]) == (
        0.0,
        False,
        False,
        0.0,
        {"invalid": 1.0},
    )
    assert "[S]FFF" in observations[0]["content"]
    _, _, _, truncated, info = env.step({"role": "assistant", "content": "<answer>Left</answer>"})
    assert truncated and info["turn_terms"] == {}  # truncated at max_turns; a valid move reports no term
    assert set(env.reward_terms) == {"invalid"}
    with pytest.raises(TypeError, match=r"^env 'gymnasium' option invalid_penalty: moved to reward\.terms\.invalid"):
        make("gymnasium", **OPTIONS, invalid_penalty=0.1)


def test_observation_formatter_and_default_action_names() -> None:
    env = make(
        "gymnasium", env_kwargs={"is_slippery": False}, observation_formatter="tests.envs.test_gym_adapter:state_text"
    )
    messages, _ = env.reset(options={"task_index": 0})
    assert messages[-1]["content"].startswith("state 0")
    observations, *_ = env.step({"role": "assistant", "content": "<answer>1</answer>"})  # Down
    assert observations[0]["content"].startswith("state 4")


def test_train_and_test_use_different_seeds() -> None:
    train, test = make("gymnasium", **OPTIONS), make("gymnasium", **OPTIONS, split="test")
    assert train.reset(options={"task_index": 0})[1]["task_id"] != test.reset(options={"task_index": 0})[1]["task_id"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"actions": ["Left", "Down"]}, "actions"),
        ({"actions": ["a", "A", "b", "c"]}, "actions"),
        ({"env_id": "NoSuchEnv-v0"}, "env_id"),
        ({"env_id": "MountainCarContinuous-v0", "env_kwargs": {"render_mode": "rgb_array"}}, "env_id"),
        ({"observation_formatter": "no_such_module:f"}, "observation_formatter"),
        ({"split": "dev"}, "split"),
        ({"num_tasks": 0}, "num_tasks"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, field) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        make("gymnasium", **options)


def test_missing_gymnasium_names_the_install(monkeypatch) -> None:
    real_import = builtins.__import__

    def no_gymnasium(name, *args, **kwargs):
        if name == "gymnasium":
            raise ImportError("No module named 'gymnasium'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gymnasium)
    with pytest.raises(ImportError, match=r"pip install 'agentic-rl\[gym\]'"):
        make("gymnasium", **OPTIONS)

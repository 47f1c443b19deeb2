"""The held-out env's options: zero-shot by default for envs with demonstrations, and the
default left out for envs without them (a text game trains from a bare recipe)."""

from __future__ import annotations

import pytest

from agentic_rl.config import ConfigError, TrainConfig, build
from agentic_rl.envs import env_factory
from agentic_rl.training.stages import eval_env_options


def test_zero_shot_default_only_where_the_env_takes_demonstrations() -> None:
    assert eval_env_options(build(TrainConfig, {})) == {"few_shot": 0}
    game = build(TrainConfig, {"env": {"name": "frozenlake", "size": 4}})
    assert eval_env_options(game) == {"size": 4}
    env_factory("frozenlake", eval_env_options(game), split="test")  # builds


def test_an_explicit_few_shot_for_an_env_without_it_still_fails() -> None:
    config = build(TrainConfig, {"env": {"name": "frozenlake"}, "eval": {"env": {"few_shot": 2}}})
    with pytest.raises(ConfigError, match="has no option 'few_shot'"):
        env_factory("frozenlake", eval_env_options(config), split="test")

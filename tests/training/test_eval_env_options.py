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


def test_sft_env_goes_on_top_of_the_env_options_and_of_each_mix_entry() -> None:
    from agentic_rl.training.stages import sft_env_options

    config = build(
        TrainConfig, {"env": {"phrasing": "words", "reversed_steps": 1.0}, "sft": {"env": {"reversed_steps": 0.5}}}
    )
    assert sft_env_options(config) == {"phrasing": "words", "reversed_steps": 0.5}
    assert sft_env_options(build(TrainConfig, {"env": {"digits": 2}})) == {"digits": 2}  # nothing on top by default
    mix = build(
        TrainConfig,
        {
            "env": {"mix": [{"name": "arithmetic", "digits": 2}, {"name": "arithmetic", "digits": 4}]},
            "sft": {"env": {"num_operands": 2}},
        },
    )
    assert [(entry["digits"], entry["num_operands"]) for entry in sft_env_options(mix)["mix"]] == [(2, 2), (4, 2)]


def test_other_eval_options_keep_the_evaluation_zero_shot() -> None:
    config = build(TrainConfig, {"env": {"few_shot": 2}, "eval": {"env": {"digits": 2}}})
    assert eval_env_options(config) == {"few_shot": 0, "digits": 2}
    explicit = build(TrainConfig, {"env": {"few_shot": 2}, "eval": {"env": {"few_shot": 1}}})
    assert eval_env_options(explicit) == {"few_shot": 1}

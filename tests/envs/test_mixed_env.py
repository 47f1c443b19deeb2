"""``env.mix``: several envs laid end to end behind one Env, and the errors for bad entries."""

from __future__ import annotations

import pytest

from agentic_rl import envs
from agentic_rl.config import ConfigError, EvalConfig, TrainConfig, build
from agentic_rl.envs import check_env, env_factory, make

MIX = [
    {"name": "arithmetic", "weight": 3, "label": "easy", "digits": 1, "num_tasks": 5},
    {"name": "frozenlake", "weight": 1, "num_tasks": 4},
]


def test_tasks_are_the_entries_end_to_end_and_reset_names_the_entry() -> None:
    env = make("mix", mix=MIX, split="test")
    check_env(env)
    assert env.num_tasks == 9 and env.spec.sizes == (5, 4) and env.spec.weights == {"easy": 3.0, "frozenlake": 1.0}
    messages, info = env.reset(options={"task_index": 6})
    alone_messages, alone_info = make("frozenlake", split="test", num_tasks=4).reset(options={"task_index": 1})
    assert messages == alone_messages
    assert info["env"] == "frozenlake" and info["task_id"] == f"frozenlake/{alone_info['task_id']}"
    assert env.max_turns == make("frozenlake").max_turns  # attributes come from the episode's env
    _, info = env.reset(options={"task_index": 2})
    assert info["env"] == "easy" and env.parser is not None
    with pytest.raises(IndexError):
        env.reset(options={"task_index": 9})


def test_task_indices_interleave_entries_from_the_offset_and_group_into_pools() -> None:
    spec = make("mix", mix=MIX, split="train").spec
    assert spec.task_indices(offset=2) == [2, 7, 3, 8, 4]
    assert spec.pools([2, 7, 3, 8, 4]) == {"easy": [2, 3, 4], "frozenlake": [7, 8]}
    assert spec.first_tasks(3) == {"easy": [0, 1, 2], "frozenlake": [5, 6, 7]}
    with pytest.raises(ConfigError, match="num_tasks: mix entry 'frozenlake' has 4 tasks"):
        spec.first_tasks(5)


def test_the_split_reaches_each_entry() -> None:
    train = make("mix", mix=[{"name": "arithmetic"}], split="train")
    test = make("mix", mix=[{"name": "arithmetic"}], split="test")
    assert (train.num_tasks, test.num_tasks) == (
        make("arithmetic", split="train").num_tasks,
        make("arithmetic", split="test").num_tasks,
    )


def test_tools_of_every_entry_are_visible_before_a_reset() -> None:
    """The run's sandbox check looks at the env's tools before any episode: a mix with a
    code entry must show its python tool."""
    from agentic_rl.tools.python_tool import PythonTool

    env = make("mix", mix=[{"name": "arithmetic"}, {"name": "code"}])
    assert any(isinstance(tool, PythonTool) for tool in env.tools)


@pytest.mark.parametrize(
    "mix, message",
    [
        ([{"name": "arithmatic"}], "env: mix[0].name: unknown env 'arithmatic' (did you mean 'arithmetic'?)"),
        ([{"name": "arithmetic", "weight": 0}], "env: mix[0].weight: expected a finite number > 0, got 0"),
        (
            [{"name": "arithmetic"}, {"name": "frozenlake", "weight": -1}],
            "env: mix[1].weight: expected a finite number > 0, got -1",
        ),
        ([{"name": "arithmetic", "weight": "heavy"}], "env: mix[0].weight: expected a finite number > 0, got 'heavy'"),
        (
            [{"name": "arithmetic"}, {"name": "arithmetic", "digits": 4}],
            "env: mix[1].label: two entries are labelled 'arithmetic'",
        ),
        ([{"name": "arithmetic", "digitz": 2}], "env: mix[0] (arithmetic): env 'arithmetic' has no option 'digitz'"),
        ([{"name": "mix", "mix": []}], "env: mix[0].name: a mix cannot contain a mix"),
        ([{"weight": 1}], "env: mix[0].name: expected an env name, got None"),
        ([{"name": "arithmetic", "label": "weighted"}], "env: mix[0].label: 'weighted' names the mix-weighted metrics"),
        ([], "env: mix: expected a non-empty list"),
    ],
)
def test_bad_entries_fail_with_one_line_naming_the_entry(mix, message) -> None:
    with pytest.raises(ConfigError) as error:
        env_factory("mix", {"mix": mix}, split="train")
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"name": "frozenlake", "mix": MIX},
            "env.name: set either env.name (one env, here 'frozenlake') or env.mix (several), not both",
        ),
        ({"mix": MIX, "few_shot": 2}, "env.few_shot: with env.mix, options go into each entry (env.mix[i].few_shot)"),
        ({"name": "mix"}, "env.mix: env.name mix needs the entries"),
    ],
)
def test_config_rejects_name_and_mix_together(env, message) -> None:
    with pytest.raises(ConfigError) as error:
        build(TrainConfig, {"env": env})
    assert str(error.value).startswith(message), str(error.value)


def test_a_mix_config_round_trips_and_names_the_mix_env() -> None:
    config = build(TrainConfig, {"env": {"mix": MIX}})
    assert config.env.name == "mix" and config.env.is_mix and config.env.options == {"mix": MIX}
    again = build(TrainConfig, config.model_dump())
    assert again.env == config.env
    assert build(EvalConfig, {"env": {"name": "mix", "mix": MIX}}).env.is_mix


def test_what_a_mix_cannot_collect_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^dpo.enabled: collecting this from an env.mix is not supported yet"):
        build(TrainConfig, {"env": {"mix": MIX}, "dpo": {"enabled": True}})
    assert build(
        TrainConfig, {"env": {"mix": MIX}, "sft": {"enabled": True}}
    ).sft.enabled  # the model's own rollouts, per entry
    assert build(
        TrainConfig, {"env": {"mix": MIX}, "sft": {"enabled": True, "collect": {"source": "expert"}}}
    ).sft.enabled  # each entry's expert
    with pytest.raises(ConfigError, match=r"^curriculum.by: env reweights the entries of an env.mix"):
        build(TrainConfig, {"curriculum": {"enabled": True, "by": "env"}})


def test_mix_is_listed() -> None:
    assert "mix" in {entry.name for entry in envs.registered()}


def test_the_mixed_recipe_builds_its_train_and_eval_envs() -> None:
    from pathlib import Path

    from agentic_rl.recipes import load_recipe
    from agentic_rl.training.stages import eval_env_options

    recipe = Path(__file__).parents[2] / "examples" / "configs" / "mixed.yaml"
    config = build(TrainConfig, load_recipe(str(recipe))[1])
    assert config.env.is_mix and config.curriculum.enabled and config.curriculum.by == "env"
    train = env_factory(config.env.name, config.env.options, split="train")()
    test = env_factory(config.env.name, eval_env_options(config), split="test")()
    assert train.spec.labels == test.spec.labels == ["arithmetic", "frozenlake"]
    assert test.spec.entries[0].options["few_shot"] == 0  # zero-shot evaluation where the env takes demonstrations
    assert "few_shot" not in test.spec.entries[1].options

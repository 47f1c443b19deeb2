"""Envs named by import path (``package.module:factory``): what Ray rollout workers in other
processes build without a ``register`` call of their own."""

from __future__ import annotations

import pytest

from agentic_rl.config import ConfigError
from agentic_rl.envs import accepts_option, env_factory, make

PATH = "agentic_rl.envs.arithmetic:make_arithmetic_env"


def test_import_path_builds_the_same_env_as_the_registered_name() -> None:
    by_path, by_name = make(PATH, split="test"), make("arithmetic", split="test")
    assert type(by_path) is type(by_name) and by_path.num_tasks == by_name.num_tasks
    assert by_path.reset(options={"task_index": 3})[0] == by_name.reset(options={"task_index": 3})[0]
    assert accepts_option(PATH, "split")
    assert (
        env_factory(PATH, {}, split="train")().reset(options={"task_index": 0})[0]
        == make("arithmetic", split="train").reset(options={"task_index": 0})[0]
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:Env", "env: cannot import 'no_such_module_xyz:Env': ModuleNotFoundError"),
        (
            "agentic_rl.envs.arithmetic:NoSuchEnv",
            "env: cannot import 'agentic_rl.envs.arithmetic:NoSuchEnv': AttributeError",
        ),
        ("agentic_rl.envs.arithmetic:__doc__", "is not a class or function"),
        ("arithmetc", "did you mean 'arithmetic'?"),
    ],
)
def test_bad_names_are_one_line_config_errors(name: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        env_factory(name, {})
    assert message in str(error.value) and "\n" not in str(error.value)

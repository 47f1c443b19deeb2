"""``train(config, env=...)``: the env as a Python object, no registration or import path."""

from __future__ import annotations

import pytest

from agentic_rl import Task, ToolEnv, TrainConfig, tool, train
from agentic_rl.config import ConfigError
from agentic_rl.envs import name_for, registered
from agentic_rl.recipes import load_recipe
from agentic_rl.training.pipeline import with_env


@tool
def echo(text: str) -> str:
    """Say the text back.

    Args:
        text: What to say back.
    """
    return text


def make_env(split: str = "train", num_tasks: int = 20) -> ToolEnv:
    tasks = [Task(id=f"echo-{split}-{i}", prompt=f"Say {i}.", answer=str(i)) for i in range(num_tasks)]
    return ToolEnv(tasks, [echo], reward_fn=lambda answer, task: float(answer == task.answer), max_turns=2)


def test_a_factory_object_trains(tmp_path) -> None:
    recipe = load_recipe("smoke")[1]
    recipe.pop("env")
    recipe["rl"].update(steps=1, task_offset=0)
    recipe["eval"] = {"num_tasks": 2}
    recipe["output_dir"] = str(tmp_path / "run")
    result = train(recipe, env=make_env, name="echo")
    assert (tmp_path / "run" / "final").is_dir() and "after" in result.evals
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert f"name: {name_for(make_env)}" in saved


def test_the_env_name_comes_from_one_place() -> None:
    name = name_for(make_env)
    assert name_for(make_env) == name  # registered once, found again
    assert sum(entry.factory is make_env for entry in registered()) <= 1
    assert with_env({"rl": {"steps": 1}}, make_env, None)["env"]["name"] == name
    config = TrainConfig(env={"name": "arithmetic"})
    with pytest.raises(ConfigError, match=r"^env: given as an argument .* and in the config \(env.name arithmetic\)"):
        with_env(config, make_env, None)
    assert with_env(TrainConfig(), "arithmetic", None).env.name == "arithmetic"
    with pytest.raises(ConfigError, match="^env: a resumed run"):
        with_env(None, make_env, "runs/x")
    with pytest.raises(TypeError, match="^env: expected a registered name"):
        name_for(42)

"""examples/custom_env.py, the docs' own-env example: the env passes check_env, a scripted
policy that calls the tool and answers earns reward 1, and the CLI trains it by import path
from the examples folder with no PYTHONPATH."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from agentic_rl.config import RolloutConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import check_env
from agentic_rl.rollout import rollout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example():
    spec = importlib.util.spec_from_file_location("custom_env", EXAMPLES / "custom_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_env_keeps_the_contract_and_the_splits_differ() -> None:
    example = _example()
    env = example.make_env(split="test", num_tasks=8)
    check_env(env)
    train_prompts = {task.prompt for task in example.make_env(split="train", num_tasks=8).tasks}
    assert train_prompts != {task.prompt for task in env.tasks}


def test_a_scripted_policy_that_calls_the_tool_and_answers_earns_reward_one(tokenizer) -> None:
    example = _example()

    def policy(prompt_ids: list[int], call_index: int) -> str:
        letter, word = re.findall(r"letter '(\w)' occur in '(\w+)'", tokenizer.decode(prompt_ids))[-1]
        if call_index == 0:
            return f'<tool_call>\n{{"name": "count_letter", "arguments": {{"word": "{word}", "letter": "{letter}"}}}}\n</tool_call>'
        return f"<answer>{word.count(letter)}</answer>"

    groups = rollout(
        ScriptedBackend(tokenizer, policy),
        lambda: example.make_env(split="test", num_tasks=4),
        task_indices=range(2),
        group_size=2,
        config=RolloutConfig(max_new_tokens=64),
        seed=0,
    )
    trajectories = [t for group in groups for t in group.trajectories]
    assert len(trajectories) == 4
    for trajectory in trajectories:
        assert (trajectory.reward, trajectory.termination_reason) == (1.0, "answered")
        assert sum(trajectory.loss_mask) < len(trajectory.loss_mask)  # the tool's output is observation


def test_the_cli_trains_it_by_import_path_without_pythonpath(tmp_path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    args = ["train", "custom_env.yaml", "--output-dir", str(tmp_path / "run")]
    for assignment in (
        "model.name=tiny-random",
        "rl.steps=1",
        "rl.tasks_per_step=2",
        "rl.group_size=2",
        "eval.num_tasks=2",
    ):
        args += ["--set", assignment]
    args += ["--set", "rollout.max_new_tokens=8"]
    result = subprocess.run(
        [sys.executable, "-m", "agentic_rl", *args], cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "final").is_dir()
    assert (tmp_path / "run" / "eval_after.json").is_file()

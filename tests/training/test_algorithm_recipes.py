"""Every algorithm recipe runs two RL steps on the tiny model through ``train()``, and
its own machinery shows in the run: critic trained and saved, KL in the reward,
generation rounds, group filtering, weights moved."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from safetensors.torch import load_file

from agentic_rl import envs
from agentic_rl.models import load
from agentic_rl.recipes import load_recipe, recipe_names
from agentic_rl.training.pipeline import train
from agentic_rl.types import ToolResult

ALGORITHM_RECIPES = ("ppo", "reinforce++", "rloo", "dapo", "mt-grpo", "gigpo", "starpo-s")


class TwoTurnEnv:
    """Turn 1 always gets an observation (a fake tool result that ran when the reply has an
    even length; ``info["turn_reward"]`` 0.25 when its length is a multiple of 3); turn 2
    ends the episode with reward 1 for an even-length reply. Random text from the tiny model
    gets every outcome, so groups have variance in outcome and in turn rewards."""

    num_tasks = 64

    def __init__(self, **options) -> None:
        self.turn = 0

    def reset(self, *, seed=None, options=None):
        self.turn = 0
        index = (options or {}).get("task_index", 0)
        return [
            {"role": "system", "content": "Reply."},
            {"role": "user", "content": f"Task {index}: say something."},
        ], {"task_id": f"two-turn-{index}"}

    def step(self, message):
        self.turn += 1
        length = len(message["content"])
        if self.turn == 1:
            result = ToolResult(name="echo", content=str(length), ok=length % 2 == 0)
            info = {"answer": None, "correct": False, "tool_results": [result], "turn_reward": 0.25 * (length % 3 == 0)}
            return [{"role": "user", "content": f"Observation: {length % 4}"}], 0.0, False, False, info
        reward = float(length % 2 == 0)
        return [], reward, True, False, {"answer": message["content"], "correct": reward > 0, "tool_results": []}


@pytest.fixture(autouse=True, scope="module")
def _two_turn_env():
    if "test-two-turn" not in {e.name for e in envs.registered()}:
        envs.register("test-two-turn", TwoTurnEnv, "test env")
    torch.set_num_threads(1)


def _tiny_overrides(recipe: dict, tmp_path) -> dict:
    recipe.update(
        model={"name": "tiny-random", "device": "cpu"},
        env={"name": "test-two-turn"},
        rollout={"max_new_tokens": 10, "max_total_tokens": 256},
        eval={"num_tasks": 2},
        sft={"enabled": False},
        tracking={"sinks": [], "report": False},
        checkpoint_every=1,
        output_dir=str(tmp_path / "run"),
    )
    recipe["rl"] = {**(recipe.get("rl") or {}), "steps": 2, "tasks_per_step": 2, "group_size": 4, "task_offset": 0}
    recipe["optim"] = {"lr": 1e-3}
    return recipe


def test_every_algorithm_has_a_recipe() -> None:
    assert set(ALGORITHM_RECIPES) <= set(recipe_names())
    for name in ALGORITHM_RECIPES:
        _, data = load_recipe(name)
        assert data["model"]["name"] == "smollm2-135m" and data["env"]["name"] == "arithmetic"
        assert data["algorithm"]["preset"] == name


@pytest.mark.slow
@pytest.mark.parametrize("name", ALGORITHM_RECIPES)
def test_algorithm_recipe_two_steps_on_the_tiny_model(name, tmp_path) -> None:
    _, recipe = load_recipe(name)
    result = train(_tiny_overrides(recipe, tmp_path), name=name)
    run = result.run_dir
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    saved = yaml.safe_load((run / "config.yaml").read_text())
    algorithm = saved["algorithm"]
    updated = [s for s in steps if "loss" in s]
    assert updated and all(math.isfinite(s["loss"]) for s in updated)

    initial, _ = load("tiny-random", device="cpu")
    final = load_file(run / "final" / "model.safetensors")
    moved = [key for key, value in initial.state_dict().items() if key in final and not torch.equal(value, final[key])]
    assert moved, "no weight changed"

    if algorithm["critic"]["kind"] != "none":
        assert all(key in s for s in updated for key in ("value_loss", "value_clip_frac", "critic_grad_norm"))
        head = load_file(run / "final" / "critic.safetensors")
        assert head["head.linear.weight"].abs().sum() > 0  # trained away from its zero init
        checkpoint = sorted((run / "checkpoints").iterdir())[-1]
        assert (checkpoint / "critic.safetensors").is_file()
        assert "critic_optimizer" in torch.load(checkpoint / "trainer.pt", weights_only=True)
    else:
        assert not (run / "final" / "critic.safetensors").exists()
    if algorithm["kl"]["in_reward"]:
        assert all("reward_kl" in s for s in steps) and all(s["kl"] == 0.0 for s in updated)  # no KL loss term
    if algorithm["group_filter"]["name"] != "none":
        for s in steps:
            assert 1 <= s["generation_rounds"] <= saved["rl"]["max_generation_rounds"]
            assert s["groups_kept"] <= 2 and s["groups_sampled"] >= s["groups_kept"]
    if name == "starpo-s":
        assert all(s["groups_kept"] == 1 for s in steps)  # ceil(0.5 * 2 groups)

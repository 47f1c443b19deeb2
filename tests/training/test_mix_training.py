"""Training and evaluating on an ``env.mix``: per-env step metrics and eval tables (scripted
backend, hand values), and a short ``train()`` on two small envs with the tiny model that
resumes to the same task draws."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from agentic_rl import envs
from agentic_rl.config import EvalConfig, TrainConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.evaluation.harness import prepare
from agentic_rl.recipes import load_recipe
from agentic_rl.training.pipeline import train
from agentic_rl.training.rl import RLTrainer
from agentic_rl.training.task_schedule import TaskPools

pytestmark = pytest.mark.usefixtures("one_thread")


class _OneTurn:
    """Ends after one reply with a fixed outcome."""

    num_tasks = 40
    solved = False

    def reset(self, *, seed=None, options=None):
        index = (options or {}).get("task_index", 0)
        return [{"role": "user", "content": f"Task {index}."}], {"task_id": f"t{index}"}

    def step(self, message):
        return [], float(self.solved), True, False, {"answer": "x", "correct": self.solved, "tool_results": []}


class SolvedEnv(_OneTurn):
    solved = True


class UnsolvedEnv(_OneTurn):
    pass


MIX = [{"name": "test-solved", "weight": 3}, {"name": "test-unsolved", "weight": 1}]


@pytest.fixture(autouse=True, scope="module")
def _envs():
    registered = {entry.name for entry in envs.registered()}
    for name, factory in (("test-solved", SolvedEnv), ("test-unsolved", UnsolvedEnv)):
        if name not in registered:
            envs.register(name, factory, "test env")


def test_step_metrics_have_a_copy_per_env(tiny) -> None:
    model, tokenizer = tiny
    config = TrainConfig.model_validate(
        {
            "model": {"name": "tiny-random"},
            "env": {"mix": MIX},
            "rollout": {"max_new_tokens": 4, "max_total_tokens": 128},
            "rl": {"steps": 1, "tasks_per_step": 8, "group_size": 2},
        }
    )
    make_env = envs.env_factory(config.env.name, config.env.options, split="train")
    spec = make_env().spec
    pools = TaskPools(spec.pools(spec.task_indices()), spec.weights)
    trainer = RLTrainer(
        config,
        copy.deepcopy(model),
        tokenizer,
        ScriptedBackend(tokenizer, ["hi"]),
        make_env,
        spec.task_indices(),
        task_pools=pools,
    )
    metrics, groups = trainer.step()
    solved = sum(trainer.task_schedule.pool_of(g.task_index) == "test-solved" for g in groups)
    assert 0 < solved < 8  # both envs drawn (seeded)
    assert metrics["mix_share@test-solved"] == solved / 8 and metrics["mix_share@test-unsolved"] == (8 - solved) / 8
    assert (metrics["reward_mean@test-solved"], metrics["accuracy@test-solved"]) == (1.0, 1.0)
    assert (metrics["reward_mean@test-unsolved"], metrics["accuracy@test-unsolved"]) == (0.0, 0.0)
    assert metrics["reward_mean"] == pytest.approx(solved / 8)
    assert metrics["frac_zero_std_groups@test-solved"] == 1.0
    assert all(t.info["env"] in ("test-solved", "test-unsolved") for g in groups for t in g.trajectories)


def test_eval_reports_each_env_and_the_weighted_mean(tokenizer) -> None:
    config = EvalConfig.model_validate({"env": {"mix": MIX}, "num_tasks": 3, "k": 1, "rollout": {"max_new_tokens": 4}})
    prepared = prepare(config, backend=ScriptedBackend(tokenizer, ["hi"]))
    assert prepared.tasks == {"test-solved": [0, 1, 2], "test-unsolved": [40, 41, 42]}
    metrics = prepared.run().metrics
    assert (metrics["avg@1@test-solved"], metrics["avg@1@test-unsolved"]) == (1.0, 0.0)
    assert metrics["avg@1@weighted"] == pytest.approx(0.75)  # weights 3 : 1
    assert metrics["avg@1"] == pytest.approx(0.5)  # every task equal
    assert metrics["num_tasks@test-solved"] == 3 and metrics["num_tasks"] == 6

    from agentic_rl.tracking.display import env_labels, env_table, without_env_metrics

    assert env_labels(metrics, 1) == ["test-solved", "test-unsolved"]
    assert [column.header for column in env_table(metrics, 1).columns] == [
        "metric",
        "test-solved",
        "test-unsolved",
        "weighted",
        "overall",
    ]
    assert "num_tasks@weighted" not in metrics and metrics["mean_reward@weighted"] == pytest.approx(0.75)
    overall = without_env_metrics(metrics, 1)
    assert overall["avg@1"] == 0.5 and not any("@test-" in key or key.endswith("@weighted") for key in overall)


def test_train_on_two_small_envs_with_a_curriculum_and_resume_to_the_same_draws(tmp_path) -> None:
    _, recipe = load_recipe("smoke")
    recipe.update(
        env={
            "mix": [
                {"name": "arithmetic", "label": "add", "weight": 2, "max_turns": 1, "digits": 1, "operators": "+"},
                {"name": "frozenlake", "weight": 1, "max_turns": 1},
            ]
        },
        rollout={"max_new_tokens": 8, "max_total_tokens": 384},
        eval={"num_tasks": 2},
        curriculum={"enabled": True, "every": 1, "by": "task"},
        rl={"steps": 3, "tasks_per_step": 3, "group_size": 2, "log_rollouts": 6},
        checkpoint_every=1,
        tracking={"report": False},
        output_dir=str(tmp_path / "run"),
    )
    result = train(recipe, name="mixed")
    run = result.run_dir
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2]
    for line in steps:
        assert line["mix_share@add"] + line["mix_share@frozenlake"] == pytest.approx(1.0)
        assert "curriculum/tasks_measured" in line
    evaluation = json.loads((run / "eval_after.json").read_text())["metrics"]
    assert {"avg@1@add", "avg@1@frozenlake", "avg@1@weighted"} <= set(evaluation) and evaluation["num_tasks"] == 4
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert {r["env"] for r in rollouts} <= {"add", "frozenlake"} and all(
        r["task_id"].startswith(r["env"] + "/") for r in rollouts
    )
    straight = [(r["step"], r["task_id"]) for r in rollouts]

    # The newest checkpoint is after step 2: the resumed run samples step 3 again.
    assert torch.load(run / "checkpoints" / "step-000002" / "trainer.pt", weights_only=False)["curriculum"][
        "pass_rates"
    ]
    train(resume=run)
    again = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert [(r["step"], r["task_id"]) for r in again] == straight


def test_cold_start_collection_splits_a_mix_by_weight(tokenizer) -> None:
    from agentic_rl.config import CollectConfig, ConfigError, build
    from agentic_rl.training.collect import collect_successful_mix, mix_shares
    from agentic_rl.training.pre_rl_stages import sft_parser

    collect = CollectConfig(num_tasks=8, samples_per_task=2, few_shot=0, max_per_task=1)
    assert [(name, share.num_tasks) for name, _, share in mix_shares(MIX, collect)] == [
        ("test-solved", 6),
        ("test-unsolved", 2),
    ]
    result = collect_successful_mix(ScriptedBackend(tokenizer, ["hi"]), MIX, collect)
    assert (result.attempted, result.successful, result.tasks_with_success, len(result.examples)) == (16, 12, 6, 6)
    assert (
        sft_parser(build(TrainConfig, {"env": {"mix": [{"name": "arithmetic"}, {"name": "frozenlake"}]}})) == "hermes"
    )
    with pytest.raises(
        ConfigError,
        match="env.mix: SFT renders every entry's conversations in one tool-call format; the entries use hermes, retool",
    ):
        sft_parser(
            build(TrainConfig, {"env": {"mix": [{"name": "arithmetic"}, {"name": "math-python", "parser": "retool"}]}})
        )


def test_expert_collection_on_a_mix_plays_each_entry_by_weight(tokenizer) -> None:
    """source: expert on a mix: each entry's expert plays its share of the tasks (split by
    weight), with that entry's options; an entry without an expert is refused in one line."""
    from agentic_rl.chat import ChatRenderer
    from agentic_rl.config import CollectConfig, ConfigError
    from agentic_rl.training.collect import collect_expert_mix

    mix = [{"name": "arithmetic", "weight": 2}, {"name": "frozenlake", "size": 3, "num_holes": 2, "max_turns": 6}]
    result = collect_expert_mix(mix, CollectConfig(source="expert", num_tasks=6), renderer=ChatRenderer(tokenizer))
    assert (result.attempted, result.successful, len(result.examples)) == (6, 6, 6)
    ids = [e["metadata"]["task_id"] for e in result.examples]
    assert [i.split("-")[0] for i in ids] == ["arithmetic"] * 4 + ["frozenlake"] * 2
    assert [len(e["messages"][1]["content"].split("\n\n")[0].split("\n")) for e in result.examples[4:]] == [
        3,
        3,
    ]  # the entry's own options: 3x3 lakes
    with pytest.raises(ConfigError, match="gymnasium has none"):
        collect_expert_mix([{"name": "arithmetic"}, {"name": "gymnasium"}], CollectConfig(source="expert", num_tasks=2))


def test_a_run_on_a_mix_collects_its_cold_start_from_every_entry(tmp_path) -> None:
    _, recipe = load_recipe("smoke")
    recipe.update(
        env={"mix": MIX},
        rollout={"max_new_tokens": 4, "max_total_tokens": 128},
        eval={"num_tasks": 2},
        sft={
            "enabled": True,
            "collect": {"num_tasks": 4, "samples_per_task": 1, "few_shot": 0},
            "train": {"epochs": 1, "batch_size": 2},
        },
        rl={**recipe["rl"], "steps": 1},
        tracking={"report": False},
        output_dir=str(tmp_path / "run"),
    )
    result = train(recipe, name="mixed")
    examples = (result.run_dir / "sft_data.jsonl").read_text().splitlines()
    assert len(examples) == 3  # 3 of the 4 tasks from the solved entry (weight 3 : 1), none from the unsolved one
    assert result.evals["after_sft"]["avg@1@test-solved"] == 1.0 and result.evals["after_sft"][
        "avg@1@weighted"
    ] == pytest.approx(0.75)

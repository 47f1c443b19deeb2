"""``train(config)`` end to end on the tiny model: every stage writes what it promises."""

from __future__ import annotations

import json

import pytest
import yaml

from agentic_rl.cli import main
from agentic_rl.data import write_jsonl
from agentic_rl.recipes import load_recipe, recipe_names
from agentic_rl.training.pipeline import train


def _sft_examples(count: int = 4) -> list[dict]:
    from agentic_rl.envs.arithmetic import ArithmeticTasks

    examples = []
    for task in ArithmeticTasks(split="train", num_tasks=count):
        expression = task.metadata["expression"]
        examples.append(
            {
                "messages": [
                    {"role": "system", "content": "You solve arithmetic problems."},
                    {"role": "user", "content": task.prompt},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "call_0",
                                "type": "function",
                                "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": task.answer},
                    {"role": "assistant", "content": f"<answer>{task.answer}</answer>"},
                ]
            }
        )
    return examples


def test_smoke_recipe_with_sft_writes_the_run_directory(tmp_path) -> None:
    data = tmp_path / "sft.jsonl"
    write_jsonl(data, _sft_examples())
    _, recipe = load_recipe("smoke")
    recipe["sft"] = {"enabled": True, "data": str(data), "train": {"epochs": 1, "batch_size": 2}}
    recipe["output_dir"] = str(tmp_path / "run")
    result = train(recipe, name="smoke")
    run = result.run_dir
    for name in (
        "config.yaml",
        "metrics.jsonl",
        "rollouts.jsonl",
        "eval_before.json",
        "eval_after_sft.json",
        "eval_after.json",
        "sft_metrics.jsonl",
        "summary.json",
        "report.html",
    ):
        assert (run / name).is_file(), name
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert {"repeated_token_ratio", "response_length_trend"} <= set(lines[0])
    assert {"reward_mean", "accuracy", "grad_norm", "tokens_per_s", "zero_advantage_skipped"} <= set(lines[0])
    # the random model's groups all score alike: no trajectory is forwarded by the update, so
    # it has no clip fractions to report (the optimizer still stepped); entropy and the
    # sampler mismatch come from a gradient-free forward, to show why nothing learns
    assert lines[0]["frac_zero_std_groups"] == lines[0]["zero_advantage_skipped"] == 1.0
    assert "clip_frac_high" not in lines[0] and lines[0]["lr"] > 0
    assert {"entropy", "rollout_logprob_diff_mean", "rollout_kl_k3"} <= set(lines[0])
    assert yaml.safe_load((run / "config.yaml").read_text())["recipe"] == "smoke"
    evaluation = json.loads((run / "eval_after.json").read_text())
    assert {"avg@1", "pass@1", "maj@1", "tool_success_rate"} <= set(evaluation["metrics"])
    assert set(result.evals) == {"before", "after_sft", "after"}
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and rollouts[0]["messages"][0]["role"] == "system"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run / "final")
    tokenizer = AutoTokenizer.from_pretrained(run / "final")
    assert model.config.vocab_size == len(tokenizer)


def test_stages_runs_only_the_named_stages_the_cold_start_alone(tmp_path) -> None:
    data = tmp_path / "sft.jsonl"
    write_jsonl(data, _sft_examples())
    _, recipe = load_recipe("smoke")
    recipe["sft"] = {"enabled": True, "data": str(data), "train": {"epochs": 1, "batch_size": 2}}
    recipe.update(output_dir=str(tmp_path / "run"), final_dtype="fp32")
    result = train(
        recipe, name="smoke", stages=("sft", "eval_after_sft", "final", "filter")
    )  # filter: named, but not enabled
    run = result.run_dir
    assert set(result.evals) == {"after_sft"} and result.steps == []
    assert (run / "sft_metrics.jsonl").is_file() and (run / "final" / "config.json").is_file()
    for name in ("eval_before.json", "eval_after.json", "metrics.jsonl", "filtered_tasks.json", "report.html"):
        assert not (run / name).exists(), name
    assert json.loads((run / "summary.json").read_text())["evals"]["after_sft"] == result.evals["after_sft"]


@pytest.mark.parametrize(
    ("stages", "resume", "message"),
    [
        (("sft", "rl_steps"), None, "stages: unknown stage 'rl_steps'; stages: eval_before, sft,"),
        (("rl",), "runs/x", "stages: only for a new run"),
    ],
)
def test_stages_errors_name_the_parameter(stages, resume, message) -> None:
    with pytest.raises(ValueError, match=message):
        train(None if resume else load_recipe("smoke")[1], stages=stages, resume=resume)


def test_existing_run_directory_is_not_overwritten(tmp_path) -> None:
    _, recipe = load_recipe("smoke")
    recipe["rl"].update(steps=0)
    recipe.update(output_dir=str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("{}\n")
    assert main(["train", "smoke", "--output-dir", str(tmp_path / "run")]) == 2


def test_recipes_are_valid_configs() -> None:
    from agentic_rl.config import TrainConfig

    assert {"default", "smoke"} <= set(recipe_names())
    for name in recipe_names():
        _, data = load_recipe(name)
        assert TrainConfig.model_validate(data).description


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "defualt"], "did you mean 'default'"),
        (["train", "smoke", "--set", "rl.steps=many"], "rl.steps"),
        (["train", "smoke", "--set", "algorithm.preset=grpo-xyz"], "unknown preset"),
        (["train", "smoke", "--set", "algorithm.policy_loss.clip_low=1.5"], "algorithm.policy_loss.clip_low"),
        (["train", "smoke", "--set", "rl.group_size=1"], "rl.group_size"),
        (["train", "smoke", "--set", "group_size=2"], "group_size: moved to rl.group_size"),
        (["train", "smoke", "--set", "optim.learning_rate=1"], "known keys: lr"),
        (["train", "smoke", "--set", "optim.lrr=1"], "did you mean 'optim.lr'"),
        (["train", "missing.yaml"], "does not exist"),
    ],
)
def test_train_cli_errors_are_one_line_with_exit_code_2(argv, message, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_stages_are_recorded_and_a_resume_skips_the_finished_ones(tmp_path) -> None:
    from agentic_rl.training.pipeline import RunEvents

    data = tmp_path / "sft.jsonl"
    write_jsonl(data, _sft_examples())
    _, recipe = load_recipe("smoke")
    recipe.update(
        sft={"enabled": True, "data": str(data), "train": {"epochs": 1, "batch_size": 2}},
        output_dir=str(tmp_path / "run"),
        checkpoint_every=1,
        tracking={"report": False},
    )
    run = train(recipe, name="smoke").run_dir
    assert json.loads((run / "stages.json").read_text())["completed"] == [
        "eval_before",
        "sft",
        "eval_after_sft",
        "rl",
        "eval_after",
        "final",
    ]
    checkpoint = json.loads((run / "checkpoints" / "step-000001" / "state.json").read_text())
    assert checkpoint["stages"] == ["eval_before", "sft", "eval_after_sft"] and checkpoint["step"] == 1
    before = json.loads((run / "eval_before.json").read_text())["metrics"]
    messages: list[str] = []
    result = train(resume=run, events=RunEvents(on_stage=messages.append))
    assert not any(m.startswith(("evaluating (before)", "SFT", "evaluating (after_sft)")) for m in messages), messages
    assert "resumed from step-000001 (step 1 of 2)" in messages and "evaluating (after)" in messages
    assert result.evals["before"] == before and "after_sft" in result.evals
    assert [line["step"] for line in result.steps] == [0, 1]


def test_bf16_mixed_run_records_its_precision_and_resumes_within_tolerance(tmp_path) -> None:
    """A bf16-mixed run: precision.json says so, the final weights are float32 masters, and
    resuming from the step-1 checkpoint ends within bf16 noise of the uninterrupted run
    (the same ops in the same order: measured identical here, but bf16 kernels may
    reduce in another order on another machine, so the check is a tolerance)."""
    import torch
    from safetensors.torch import load_file

    _, recipe = load_recipe("smoke")
    recipe.update(
        output_dir=str(tmp_path / "run"),
        checkpoint_every=1,
        precision="bf16-mixed",
        tracking={"report": False},
        optim={"lr": 1e-3},
    )
    run = train(recipe, name="smoke").run_dir
    assert json.loads((run / "precision.json").read_text()) == {
        "setting": "bf16-mixed",
        "precision": "bf16-mixed",
        "reason": "set in the config",
    }
    straight = load_file(run / "final" / "model.safetensors")
    straight_metrics = (run / "metrics.jsonl").read_text().splitlines()
    result = train(resume=run)
    resumed = load_file(run / "final" / "model.safetensors")
    assert all(value.dtype == torch.float32 for value in straight.values())
    for name, value in straight.items():
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=1e-4)
    assert [line["step"] for line in result.steps] == [0, 1]
    last, again = json.loads(straight_metrics[-1]), result.steps[-1]
    assert again["reward_mean"] == last["reward_mean"]
    assert abs(again["loss"] - last["loss"]) < 1e-3


def _tiny_recipe(path) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "description": "resume --set test",
                "model": {"name": "tiny-random", "device": "cpu"},
                "env": {"name": "arithmetic", "max_turns": 2},
                "rollout": {"max_new_tokens": 8, "max_total_tokens": 512},
                "eval": {"num_tasks": 2},
                "optim": {"lr": 1e-3},
                "rl": {"steps": 2, "tasks_per_step": 2, "group_size": 2},
                "checkpoint_every": 1,
                "tracking": {"sinks": [], "report": False},
            }
        )
    )
    return str(path)


def test_resume_with_set_trains_the_extra_steps_with_the_new_values(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert (
        main(["train", _tiny_recipe(tmp_path / "recipe.yaml"), "--output-dir", str(run), "--set", "precision=fp32"])
        == 0
    )
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    saved = (run / "config.yaml").read_text()
    capsys.readouterr()
    # A key that may not change is refused before anything runs, and config.yaml stays as it was.
    assert main(["train", "--resume", str(run), "--set", "rl.steps=3", "--set", "rl.group_size=4"]) == 2
    assert capsys.readouterr().err.startswith(
        "agentic-rl: error: --set on --resume: rl.group_size cannot change mid-run"
    )
    assert (run / "config.yaml").read_text() == saved

    assert (
        main(
            [
                "train",
                "--resume",
                str(run),
                "--set",
                "rl.steps=3",
                "--set",
                "optim.lr=5e-4",
                "--set",
                "eval.num_tasks=3",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "resume: rl.steps: 2 -> 3" in err and "resume: optim.lr: 0.001 -> 0.0005" in err and "(step 1 of 3)" in err
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in steps] == [0, 1, 2]
    assert steps[0]["lr"] == pytest.approx(1e-3) and steps[2]["lr"] == pytest.approx(
        5e-4
    )  # the resumed steps use the new lr
    assert json.loads((run / "eval_after.json").read_text())["metrics"]["num_tasks"] == 3
    config = yaml.safe_load((run / "config.yaml").read_text())  # a later resume continues with them
    assert (
        config["recipe"],
        config["rl"]["steps"],
        config["optim"]["lr"],
        config["eval"]["num_tasks"],
        config["rl"]["group_size"],
    ) == ("recipe", 3, 5e-4, 3, 2)


@pytest.mark.parametrize(
    "assignment, message",
    [
        (
            "rl.group_size=4",
            "--set on --resume: rl.group_size cannot change mid-run (allowed: rl.steps, optim.lr, optim.schedule, optim.warmup_steps, eval.*, tracking.*, checkpoint_every, keep_checkpoints, backend.api_key)",
        ),
        ("optim.weight_decay=0.1", "--set on --resume: optim.weight_decay cannot change mid-run"),
        ("model.name=smollm2-135m", "--set on --resume: model.name cannot change mid-run"),
        ("rl.stepz=3", "unknown config key 'rl.stepz'; did you mean 'rl.steps'?"),
        ("rl.steps=-1", "rl.steps:"),
    ],
)
def test_resume_refuses_keys_that_cannot_change_mid_run(assignment, message, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"recipe": "smoke", **load_recipe("smoke")[1]}))
    assert main(["train", "--resume", str(run), "--set", assignment]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"agentic-rl: error: {message}")
        and len(err.strip().splitlines()) == 1
        and "Traceback" not in err
    )


def test_resume_overrides_in_the_python_api(tmp_path) -> None:
    from agentic_rl.config import ConfigError, OptimConfig, resume_config

    _, saved = load_recipe("smoke")
    config, changed = resume_config(
        saved,
        {
            "optim": {"schedule": "cosine", "warmup_steps": 1},
            "tracking": {"thresholds": {"entropy": 0.1}},
            "checkpoint_every": 5,
        },
    )
    assert (config.optim.schedule, config.optim.warmup_steps, config.tracking.thresholds, config.checkpoint_every) == (
        "cosine",
        1,
        {"entropy": 0.1},
        5,
    )
    assert config.optim.lr == OptimConfig().lr and config.rl.group_size == saved["rl"]["group_size"]
    assert "optim.schedule: 'constant' -> 'cosine'" in changed and len(changed) == 4
    with pytest.raises(ConfigError, match="overrides: only for a resumed run"):
        train(load_recipe("smoke")[1], overrides={"rl": {"steps": 3}})


def test_sft_env_collects_the_cold_start_on_other_options_than_rl(tmp_path) -> None:
    """``sft.env``: the expert's cold start on forward steps only, RL (and the env's
    own options) on reversed steps only."""
    _, recipe = load_recipe("smoke")
    recipe["env"] = {"name": "arithmetic", "phrasing": "words", "operators": "-", "reversed_steps": 1.0}
    recipe["sft"] = {
        "enabled": True,
        "env": {"reversed_steps": 0.0},
        "collect": {"source": "expert", "num_tasks": 6},
        "train": {"epochs": 1, "batch_size": 3},
    }
    recipe.update(output_dir=str(tmp_path / "run"))
    recipe["rl"].update(steps=1, tasks_per_step=2, group_size=2)
    run = train(recipe, name="smoke", stages=("sft", "rl")).run_dir
    collected = [
        json.loads(line)["messages"][1]["content"] for line in (run / "sft_data.jsonl").read_text().splitlines()
    ]
    assert len(collected) == 6 and not any(" from " in prompt for prompt in collected)
    trained = [json.loads(line)["messages"][1]["content"] for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert trained and all(prompt.count(" from ") == 2 for prompt in trained)  # both steps reversed


def test_sft_env_beside_sft_data_is_a_config_error(tmp_path) -> None:
    from agentic_rl.config import ConfigError, TrainConfig, build

    with pytest.raises(ConfigError, match=r"^sft\.env: .*sft\.data"):
        build(TrainConfig, {"sft": {"enabled": True, "data": str(tmp_path / "x.jsonl"), "env": {"few_shot": 0}}})


def test_a_checkpoint_keeps_the_shared_memory_store_and_a_resume_restores_it(tmp_path) -> None:
    """env.memory: shared: the notes agents keep across episodes are part of the run's
    state: a checkpoint saves them, a resume (here in the same process, after they were
    lost) brings them back."""
    from agentic_rl.tools import MemoryConfig, shared_store

    memory = MemoryConfig(mode="shared", store="test-checkpointed-store", max_notes=4)
    store = shared_store(memory.store, **memory.store_caps())
    store.write("the answer is 42", key="hint")
    _, recipe = load_recipe("smoke")
    recipe["env"] = {**recipe["env"], "memory": {"mode": "shared", "store": memory.store, "max_notes": 4}}
    recipe["rollout"] = {**recipe["rollout"], "max_total_tokens": 1024}  # room for the memory tools' prompt
    recipe.update(output_dir=str(tmp_path / "run"), checkpoint_every=1, tracking={"report": False})
    run = train(recipe, name="smoke").run_dir
    saved = json.loads((run / "checkpoints" / "step-000001" / "state.json").read_text())["memory"]
    assert {
        "name": memory.store,
        "caps": memory.store_caps(),
        "notes": [["hint", "the answer is 42"]],
        "next_auto_key": 0,
        "evictions": 0,
    } in saved
    store.clear()
    train(resume=run)
    assert store.read("hint") == "the answer is 42"


def test_sft_data_longer_than_max_length_is_one_line_naming_the_setting(tmp_path) -> None:
    from agentic_rl.config import ConfigError

    data = tmp_path / "sft.jsonl"
    write_jsonl(data, _sft_examples())
    _, recipe = load_recipe("smoke")
    recipe.update(
        sft={"enabled": True, "data": str(data), "train": {"epochs": 1, "batch_size": 2, "max_length": 32}},
        output_dir=str(tmp_path / "run"),
    )
    with pytest.raises(
        ConfigError,
        match=r"^sft\.train\.max_length: all 4 of the 4 SFT conversations are longer than 32 tokens; raise it$",
    ):
        train(recipe, name="smoke", stages=("sft",))

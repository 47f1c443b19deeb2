"""DPO on the tiny random model (real tokenizer and chat template): pairs from groups and
from rollouts.jsonl, two training steps, the pipeline stage, the CLI."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config import DPOConfig, RolloutConfig
from agentic_rl.data import read_jsonl, write_jsonl
from agentic_rl.engines.hf import HFBackend
from agentic_rl.envs.arithmetic import DEFAULT_SYSTEM_PROMPT, ArithmeticTasks, demonstration
from agentic_rl.parsers import HermesParser
from agentic_rl.training.dpo import (
    collect_pairs,
    pairs_from_groups,
    pairs_from_rollout_records,
    reference_logprobs,
    tokenize_pairs,
    train_dpo,
    validate_pair,
)
from agentic_rl.types import Trajectory, TrajectoryGroup

PARSER = HermesParser()


pytestmark = pytest.mark.usefixtures("one_thread")


def solved(task, answer: str | None = None) -> list[dict]:
    """A raw trajectory's messages: calculator call, observation, then an answer."""
    messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, *demonstration(task, "tool", PARSER)]
    if answer is not None:
        messages[-1] = {"role": "assistant", "content": f"<answer>{answer}</answer>"}
    return messages


def trajectory(task, reward: float, answer: str | None = None, **kw) -> Trajectory:
    return Trajectory(task_id=task.id, group_id=task.id, messages=solved(task, answer), reward=reward, **kw)


def arithmetic_pairs(n: int) -> list[dict]:
    tasks = ArithmeticTasks(split="train", digits=2)[:n]
    groups = [TrajectoryGroup(t.id, t.id, [trajectory(t, 1.0), trajectory(t, 0.0, answer="12345")]) for t in tasks]
    return pairs_from_groups(groups, PARSER)


def test_pairs_are_best_against_worst_and_skip_ties_and_failures() -> None:
    a, b, c = ArithmeticTasks(split="train", digits=2)[:3]
    groups = [
        TrajectoryGroup(
            a.id,
            "ga",
            [
                trajectory(a, 0.5, "1"),
                trajectory(a, 1.0),
                trajectory(a, 0.0, "2"),
                trajectory(a, 2.0, "3", infra_error="crash"),
            ],
        ),
        TrajectoryGroup(b.id, "gb", [trajectory(b, 1.0), trajectory(b, 1.0, "9")]),  # tie: no pair
        TrajectoryGroup(c.id, "gc", [trajectory(c, 0.0, "7")]),  # one sample: no pair
    ]
    [pair] = pairs_from_groups(groups, PARSER)
    assert [m["role"] for m in pair["prompt"]] == ["system", "user"]
    assert [m["role"] for m in pair["chosen"]] == ["assistant", "tool", "assistant"]
    assert pair["chosen"][0]["tool_calls"][0]["function"]["name"] == "calculator"  # structured, as SFT data
    assert pair["chosen"][-1]["content"] == f"<answer>{a.answer}</answer>"
    assert pair["rejected"][-1]["content"] == "<answer>2</answer>"
    assert pair["metadata"] == {"task_id": a.id, "chosen_reward": 1.0, "rejected_reward": 0.0}
    validate_pair(pair)
    assert json.loads(json.dumps(pair)) == pair


def test_pairs_from_rollouts_jsonl_records() -> None:
    a, b = ArithmeticTasks(split="train", digits=2)[:2]
    records = [
        {"step": s, **t.to_dict()}
        for s, t in [
            (0, trajectory(a, 1.0)),
            (0, trajectory(a, 0.0, "5")),
            (1, trajectory(a, 0.0, "6")),
            (0, trajectory(b, 0.0, "1")),
        ]
    ]
    [pair] = pairs_from_rollout_records(records, PARSER)  # step 1's lone record and b's lone record make no pair
    assert pair["rejected"][-1]["content"] == "<answer>5</answer>"
    with pytest.raises(ValueError, match="rollout record 1"):
        pairs_from_rollout_records([{"reward": 1.0}], PARSER)


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ({"prompt": [], "chosen": [], "rejected": []}, "pair 3.prompt: expected a non-empty list"),
        (
            {
                "prompt": [{"role": "user", "content": "q"}],
                "chosen": [{"role": "assistant", "content": "a"}],
                "rejected": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}],
            },
            "pair 3.rejected: must start with an assistant",
        ),
        (
            {
                "prompt": [{"role": "user", "content": "q"}],
                "chosen": [{"role": "robot", "content": "a"}],
                "rejected": [{"role": "assistant", "content": "b"}],
            },
            "pair 3.chosen: messages\\[1\\].role",
        ),
    ],
)
def test_bad_pairs_fail_with_one_line(pair, message) -> None:
    with pytest.raises(ValueError, match=message):
        validate_pair(pair, 3)


def test_two_steps_lower_the_loss_grow_the_margin_and_keep_the_reference(tiny, tokenizer) -> None:
    model = copy.deepcopy(tiny[0])
    initial = copy.deepcopy(model)
    pairs = arithmetic_pairs(4)
    config = DPOConfig(epochs=2, batch_size=4, lr=1e-3, beta=0.5)
    sequences, dropped = tokenize_pairs(pairs, tokenizer, PARSER, config.max_length)
    assert dropped == 0 and len(sequences) == 4
    # loss only on assistant tokens: the rejected side differs from the chosen only in the last answer
    (chosen_ids, chosen_mask), (rejected_ids, rejected_mask) = sequences[0]
    prompt = next(i for i, m in enumerate(chosen_mask) if m)
    assert chosen_ids[:prompt] == rejected_ids[:prompt] and not any(chosen_mask[:prompt])
    reference_before = reference_logprobs(initial, sequences, config, tokenizer.pad_token_id)
    steps = []
    result = train_dpo(model, tokenizer, pairs, config, parser=PARSER, on_step=steps.append)
    assert result.steps == 2 and [s["step"] for s in steps] == [1, 2]
    # step 1 starts at policy == reference: loss log 2, margin 0
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-5) and result.margins[0] == pytest.approx(
        0.0, abs=1e-5
    )
    assert result.losses[1] < result.losses[0] and result.margins[1] > 0
    # the reference is the initial policy, untouched: recomputing it gives the same numbers
    assert torch.allclose(reference_logprobs(initial, sequences, config, tokenizer.pad_token_id), reference_before)
    after = reference_logprobs(model, sequences, config, tokenizer.pad_token_id)
    margins = (after[:, 0] - reference_before[:, 0]) - (after[:, 1] - reference_before[:, 1])
    assert (margins > 0).all()
    assert not model.training


class ParityEnv:
    """One turn; reward 1 when the reply has an even number of characters (the random
    model gets both outcomes, so most groups make a pair)."""

    def reset(self, *, seed=None, options=None):
        index = (options or {}).get("task_index", 0)
        return [
            {"role": "system", "content": "Reply."},
            {"role": "user", "content": f"Task {index}: say something."},
        ], {"task_id": f"parity-{index}"}

    def step(self, message):
        reward = float(len(message["content"]) % 2 == 0)
        return [], reward, True, False, {"answer": message["content"], "correct": reward > 0, "tool_results": []}


def test_collect_pairs_samples_groups_with_the_model(tiny, tokenizer) -> None:
    model = copy.deepcopy(tiny[0])
    result = collect_pairs(
        HFBackend(model, tokenizer),
        ParityEnv,
        range(6),
        samples_per_task=4,
        parser=PARSER,
        rollout_config=RolloutConfig(max_new_tokens=8),
        seed=0,
    )
    assert result.groups == 6 and len(result.pairs) + result.tied == 6 and result.pairs
    for pair in result.pairs:
        assert pair["metadata"]["chosen_reward"] == 1.0 and pair["metadata"]["rejected_reward"] == 0.0
        validate_pair(pair)


def test_dpo_recipe_stage_on_the_tiny_model(tmp_path) -> None:
    from agentic_rl.recipes import load_recipe
    from agentic_rl.training.pipeline import train

    data = write_jsonl(tmp_path / "pairs.jsonl", arithmetic_pairs(2))
    _, recipe = load_recipe("dpo")
    recipe.update(
        model={"name": "tiny-random", "device": "cpu"},
        sft={"enabled": False},
        eval={"num_tasks": 2},
        rollout={"max_new_tokens": 8, "max_total_tokens": 512},
        tracking={"sinks": [], "report": False},
        output_dir=str(tmp_path / "run"),
    )
    recipe["dpo"] = {**recipe["dpo"], "data": str(data), "train": {"epochs": 2, "batch_size": 2, "lr": 1e-3}}
    result = train(recipe, name="dpo")
    lines = read_jsonl(result.run_dir / "dpo_metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2] and lines[1]["loss"] < lines[0]["loss"]
    assert result.steps == [] and set(result.evals) == {"before", "after"}
    assert (result.run_dir / "final" / "config.json").is_file()


def test_dpo_cli_trains_and_saves(tmp_path, capsys) -> None:
    data = write_jsonl(tmp_path / "pairs.jsonl", arithmetic_pairs(2))
    out = tmp_path / "model"
    assert (
        main(
            [
                "dpo",
                "--model",
                "tiny-random",
                "--data",
                str(data),
                "--output-dir",
                str(out),
                "--set",
                "batch_size=2",
                "--set",
                "lr=1e-3",
            ]
        )
        == 0
    )
    assert (out / "config.json").is_file()
    captured = capsys.readouterr()
    assert "DPO: 2 pairs, 1 steps" in captured.out + captured.err  # the rich console writes to stderr


@pytest.mark.parametrize(
    ("lines", "extra", "message"),
    [
        ([{"prompt": "hi"}], [], "--data: pair 0.prompt"),
        ([], ["--set", "beta=-1"], "beta"),
        ([], ["--set", "loss_type=ipo", "--set", "label_smoothing=0.1"], "label_smoothing"),
    ],
)
def test_dpo_cli_errors_are_one_line_with_exit_code_2(tmp_path, capsys, lines, extra, message) -> None:
    data = write_jsonl(tmp_path / "pairs.jsonl", lines or arithmetic_pairs(1))
    code = main(["dpo", "--model", "tiny-random", "--data", str(data), "--output-dir", str(tmp_path / "m"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1

"""Training agent programs through the gateway (agentic_rl.agents.train): 16 concurrent
episodes per step on the tiny model, an agent that rewrites its history (several samples
sharing an episode's advantage), agent exceptions as infra errors, the example agent and
the train-agent command."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("openai")

from agentic_rl import agents  # noqa: E402
from agentic_rl.config import AlgorithmConfig, TrainConfig  # noqa: E402
from agentic_rl.training.scoring import score  # noqa: E402
from agentic_rl.types import Trajectory, TrajectoryGroup  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TASKS = [{"id": f"t{i}", "question": f"Say something about {i}."} for i in range(16)]


def _config(rl: dict | None = None, **overrides) -> TrainConfig:
    data = {
        "model": {"name": "tiny-random", "device": "cpu"},
        "precision": "fp32",
        "rl": {"steps": 2, "tasks_per_step": 4, "group_size": 4, **(rl or {})},
        "rollout": {"max_new_tokens": 8, "max_total_tokens": 512},
        "optim": {"lr": 1e-3},
    }
    data.update(overrides)
    return TrainConfig.model_validate(data)


def one_call_agent(task, client):
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["question"]}])
    return reply.choices[0].message.content


def parity(answer, task) -> float:
    return float(len(answer or "") % 2 == 0)


def test_sixteen_concurrent_episodes_per_step_train_the_policy(tiny) -> None:
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = agents.train(one_call_agent, TASKS, parity, _config(), loaded=(model, tokenizer))
    assert len(result.steps) == 2
    for step in result.steps:
        assert step["calls_per_episode"] == 1.0 and step["samples_per_episode"] == 1.0 and step["agent_errors"] == 0.0
        assert 0.0 <= step["reward_mean"] <= 1.0 and step["infra_errors"] == 0
    assert any(step["grad_norm"] > 0 for step in result.steps)
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_a_seeded_run_repeats(tiny) -> None:
    """Episode streams come from the run's seed: two runs sample the same replies."""
    runs = [
        agents.train(
            one_call_agent, TASKS, parity, _config(rl={"steps": 1}), loaded=(copy.deepcopy(tiny[0]), tiny[1])
        ).steps[0]
        for _ in range(2)
    ]
    assert runs[0]["reward_mean"] == runs[1]["reward_mean"] and runs[0]["response_length"] == runs[1]["response_length"]


def rewriting_agent(task, client):
    """Two calls; the second rewrites the history (a summary): two samples per episode."""
    first = (
        client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": task["question"]}], max_tokens=4
        )
        .choices[0]
        .message.content
    )
    return (
        client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": f"Summary: {first[:10]}. Go on."}], max_tokens=4
        )
        .choices[0]
        .message.content
    )


def test_an_agent_that_rewrites_its_history_trains_on_every_sample(tiny) -> None:
    result = agents.train(
        rewriting_agent, TASKS, parity, _config(rl={"steps": 1}), loaded=(copy.deepcopy(tiny[0]), tiny[1])
    )
    step = result.steps[0]
    assert step["calls_per_episode"] == 2.0 and step["samples_per_episode"] == 2.0


def flaky_agent(task, client):
    if task["id"] in ("t0", "t1"):
        raise RuntimeError("the agent's own bug")
    return one_call_agent(task, client)


def test_agent_exceptions_are_infra_errors_or_zero_reward(tiny) -> None:
    config = _config(rl={"steps": 1, "tasks_per_step": 2, "task_offset": 0})
    infra = agents.train(flaky_agent, TASKS[:2] * 2, parity, config, loaded=(copy.deepcopy(tiny[0]), tiny[1])).steps[0]
    assert infra["agent_errors"] == 1.0 and infra["infra_errors"] == 8 and infra["skipped_infra"] == 1.0
    with pytest.raises(ValueError, match="on_agent_error"):
        agents.train(
            flaky_agent, TASKS, parity, config, on_agent_error="ignore", loaded=(copy.deepcopy(tiny[0]), tiny[1])
        )


def test_episode_level_advantages_by_hand() -> None:
    """GRPO over episodes, not samples: episode a (reward 1) has two samples (one earlier
    segment), b (reward 0) one; a's samples both get a's advantage, and b counts once."""

    def sample(reward: float) -> Trajectory:
        return Trajectory(
            task_id="x",
            group_id="g",
            token_ids=[1, 2, 3],
            loss_mask=[0, 1, 1],
            sampler_logprobs=[0.0, -1.0, -1.0],
            reward=reward,
        )

    a, b = sample(1.0), sample(0.0)
    a.segments = [sample(1.0)]
    group = TrajectoryGroup(task_id="x", group_id="g", trajectories=[a, b])
    scored = score([group], AlgorithmConfig(preset="grpo"), max_total_tokens=512)
    alone = score(
        [TrajectoryGroup(task_id="x", group_id="g", trajectories=[sample(1.0), sample(0.0)])],
        AlgorithmConfig(preset="grpo"),
        max_total_tokens=512,
    )
    up, down = alone.advantages[0][1], alone.advantages[1][1]
    assert up > 0 > down
    assert scored.trajectories == [a.segments[0], a, b]
    assert scored.advantages == [[0.0, up, up], [0.0, up, up], [0.0, down, down]]
    with pytest.raises(ValueError, match="one advantage per episode"):
        score([group], AlgorithmConfig(preset="grpo", advantage="gigpo"), max_total_tokens=512)


def chained_agent(task, client):
    """Two calls, the second extending the first: one two-turn trajectory per episode."""
    messages = [{"role": "user", "content": task["question"]}]
    first = client.chat.completions.create(model="policy", messages=messages, max_tokens=4).choices[0].message.content
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "And then?"}]
    return client.chat.completions.create(model="policy", messages=messages, max_tokens=4).choices[0].message.content


def by_task(answer, task) -> float:
    """1 on even task numbers, whatever the agent said: a reward whose held-out score is known."""
    return float(int(task["id"][1:]) % 2 == 0)


def test_evaluate_scores_k_episodes_per_task(tiny) -> None:
    tasks = TASKS[:6]  # t0..t5: tasks t0, t2, t4 score 1
    metrics = agents.evaluate(chained_agent, tasks, by_task, _config(), k=3, loaded=(copy.deepcopy(tiny[0]), tiny[1]))
    assert (
        metrics["avg@3"] == pytest.approx(0.5)
        and metrics["pass@3"] == pytest.approx(0.5)
        and metrics["mean_reward"] == pytest.approx(0.5)
    )
    assert metrics["num_tasks"] == 6 and metrics["num_samples"] == 18
    assert (
        metrics["calls_per_episode"] == 2.0
        and metrics["samples_per_episode"] == 1.0
        and metrics["mean_turns"] == 2.0
        and metrics["agent_errors"] == 0.0
    )
    flaky = agents.evaluate(flaky_agent, tasks, by_task, _config(), k=2, loaded=(copy.deepcopy(tiny[0]), tiny[1]))
    assert flaky["agent_errors"] == pytest.approx(2 / 6) and flaky["infra_error_rate"] == pytest.approx(2 / 6)
    assert flaky["avg@2"] == pytest.approx(2 / 6)  # t0 failed (scored as not correct): t2 and t4 remain
    with pytest.raises(ValueError, match="k: expected at least 1"):
        agents.evaluate(chained_agent, tasks, by_task, _config(), k=0, loaded=tiny)
    # The same held-out streams every time: a paired before/after comparison.
    replies = []

    def recording_agent(task, client):
        replies.append(one_call_agent(task, client))
        return replies[-1]

    for _ in range(2):
        agents.evaluate(
            recording_agent, TASKS[:4], parity, _config(), concurrency=1, loaded=(copy.deepcopy(tiny[0]), tiny[1])
        )
    assert replies[:4] == replies[4:]


def test_a_run_directory_with_held_out_evals_checkpoints_and_an_exact_resume(tiny, tmp_path) -> None:
    """train() with output_dir writes a run directory; resume= continues it from its newest
    checkpoint and repeats the interrupted run's next step exactly."""
    from agentic_rl.config import ConfigError

    run = tmp_path / "run"
    config = _config(rl={"steps": 2}, checkpoint_every=1, output_dir=str(run), seed=3)
    first = agents.train(
        one_call_agent, TASKS, parity, config, eval_tasks=TASKS[:4], eval_k=2, loaded=(copy.deepcopy(tiny[0]), tiny[1])
    )
    assert set(first.evals) == {"before", "after"} and first.evals["before"]["num_samples"] == 8
    assert json.loads((run / "eval_after.json").read_text()) == first.evals["after"]
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step-000001"
    ]  # none at the last step: final/ is the model
    assert (run / "final" / "config.json").is_file() and "recipe: " + agents.agent_name(one_call_agent) in (
        run / "config.yaml"
    ).read_text()
    with pytest.raises(ConfigError, match="already holds a run"):
        agents.train(one_call_agent, TASKS, parity, config, loaded=(copy.deepcopy(tiny[0]), tiny[1]))

    # Resume from step 1 with one more step: step 2 is the interrupted run's step 2 again.
    stages = []
    resumed = agents.train(
        one_call_agent,
        TASKS,
        parity,
        {"rl": {"steps": 3}},
        eval_tasks=TASKS[:4],
        eval_k=2,
        resume=run,
        on_stage=stages.append,
        loaded=(copy.deepcopy(tiny[0]), tiny[1]),
    )
    assert "resumed from step-000001 (step 1 of 3)" in stages and "resume: rl.steps: 2 -> 3" in stages
    assert [int(s["step"]) for s in resumed.steps] == [0, 1, 2]
    assert (
        resumed.steps[1]["reward_mean"] == first.steps[1]["reward_mean"]
        and resumed.steps[1]["response_length"] == first.steps[1]["response_length"]
    )
    assert resumed.steps[1]["loss"] == pytest.approx(first.steps[1]["loss"], abs=1e-6)
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert resumed.evals["before"] == first.evals["before"]  # evaluated once, read back
    with pytest.raises(ConfigError, match="cannot change mid-run"):
        agents.train(
            one_call_agent,
            TASKS,
            parity,
            {"rl": {"group_size": 2}},
            resume=run,
            loaded=(copy.deepcopy(tiny[0]), tiny[1]),
        )
    with pytest.raises(ConfigError, match="trained the agent .*one_call_agent, not .*chained_agent"):
        agents.train(chained_agent, TASKS, parity, None, resume=run, loaded=(copy.deepcopy(tiny[0]), tiny[1]))


def test_the_example_agent_and_the_train_agent_command(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "openai_agent.py"),
            "--model",
            "tiny-random",
            "--steps",
            "2",
            "--tasks-per-step",
            "2",
            "--group-size",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("step ")] == ["1/2", "2/2"]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"question": f"What is {i} * 3 + 1?", "answer": i * 3 + 1}) + "\n" for i in range(8))
    )
    command = [
        sys.executable,
        "-m",
        "agentic_rl",
        "train-agent",
        "openai_agent:agent",
        "--reward",
        "openai_agent:reward",
        "--tasks",
        str(tasks),
        "--output-dir",
        str(tmp_path / "run"),
        "--eval-tasks",
        str(tasks),
        "--eval-k",
        "2",
        "--set",
        "model.name=tiny-random",
        "--set",
        "rl.steps=1",
        "--set",
        "rl.tasks_per_step=2",
        "--set",
        "rl.group_size=2",
        "--set",
        "precision=fp32",
    ]
    done = subprocess.run(command, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [logged] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert (tmp_path / "run" / "final").is_dir()
    assert (
        "calls_per_episode" in logged and "tool_success_rate" not in logged and "tool_calls_per_episode" not in logged
    )  # no env tool metrics (always 0 here)
    assert (
        "model calls " in done.stderr and "tool ok" not in done.stderr
    )  # the agent runs its own tools: the step line shows model calls
    assert (
        "held-out (before): avg@2 " in done.stderr and "held-out (after): avg@2 " in done.stderr
    )  # progress and results on stderr, as for train
    assert json.loads((tmp_path / "run" / "eval_after.json").read_text())["num_samples"] == 16
    bad = subprocess.run(
        [sys.executable, "-m", "agentic_rl", "train-agent", "nowhere:agent", "--tasks", str(tasks)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        bad.returncode != 0
        and "agent: cannot import 'nowhere:agent'" in bad.stderr + bad.stdout
        and "Traceback" not in bad.stderr
    )

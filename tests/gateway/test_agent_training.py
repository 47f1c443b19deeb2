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


def _config(**overrides) -> TrainConfig:
    data = {"model": {"name": "tiny-random", "device": "cpu"}, "precision": "fp32", "steps": 2, "tasks_per_step": 4, "group_size": 4,
            "rollout": {"max_new_tokens": 8, "max_total_tokens": 512}, "optim": {"lr": 1e-3}}
    data.update(overrides)
    return TrainConfig.model_validate(data)


def one_call_agent(task, client):
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["question"]}])
    return reply.choices[0].message.content


def parity(task, answer) -> float:
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
    runs = [agents.train(one_call_agent, TASKS, parity, _config(steps=1), loaded=(copy.deepcopy(tiny[0]), tiny[1])).steps[0] for _ in range(2)]
    assert runs[0]["reward_mean"] == runs[1]["reward_mean"] and runs[0]["response_length"] == runs[1]["response_length"]


def rewriting_agent(task, client):
    """Two calls; the second rewrites the history (a summary): two samples per episode."""
    first = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["question"]}], max_tokens=4).choices[0].message.content
    return client.chat.completions.create(model="policy", messages=[{"role": "user", "content": f"Summary: {first[:10]}. Go on."}], max_tokens=4).choices[0].message.content


def test_an_agent_that_rewrites_its_history_trains_on_every_sample(tiny) -> None:
    result = agents.train(rewriting_agent, TASKS, parity, _config(steps=1), loaded=(copy.deepcopy(tiny[0]), tiny[1]))
    step = result.steps[0]
    assert step["calls_per_episode"] == 2.0 and step["samples_per_episode"] == 2.0


def flaky_agent(task, client):
    if task["id"] in ("t0", "t1"):
        raise RuntimeError("the agent's own bug")
    return one_call_agent(task, client)


def test_agent_exceptions_are_infra_errors_or_zero_reward(tiny) -> None:
    config = _config(steps=1, tasks_per_step=2, task_offset=0)
    infra = agents.train(flaky_agent, TASKS[:2] * 2, parity, config, loaded=(copy.deepcopy(tiny[0]), tiny[1])).steps[0]
    assert infra["agent_errors"] == 1.0 and infra["infra_errors"] == 8 and infra["skipped_infra"] == 1.0
    with pytest.raises(ValueError, match="on_agent_error"):
        agents.train(flaky_agent, TASKS, parity, config, on_agent_error="ignore", loaded=(copy.deepcopy(tiny[0]), tiny[1]))


def test_episode_level_advantages_by_hand() -> None:
    """GRPO over episodes, not samples: episode a (reward 1) has two samples (one earlier
    segment), b (reward 0) one; a's samples both get a's advantage, and b counts once."""

    def sample(reward: float) -> Trajectory:
        return Trajectory(task_id="x", group_id="g", token_ids=[1, 2, 3], loss_mask=[0, 1, 1], sampler_logprobs=[0.0, -1.0, -1.0], reward=reward)

    a, b = sample(1.0), sample(0.0)
    a.segments = [sample(1.0)]
    group = TrajectoryGroup(task_id="x", group_id="g", trajectories=[a, b])
    scored = score([group], AlgorithmConfig(preset="grpo"), max_total_tokens=512)
    alone = score([TrajectoryGroup(task_id="x", group_id="g", trajectories=[sample(1.0), sample(0.0)])], AlgorithmConfig(preset="grpo"), max_total_tokens=512)
    up, down = alone.advantages[0][1], alone.advantages[1][1]
    assert up > 0 > down
    assert scored.trajectories == [a.segments[0], a, b]
    assert scored.advantages == [[0.0, up, up], [0.0, up, up], [0.0, down, down]]
    with pytest.raises(ValueError, match="one advantage per episode"):
        score([group], AlgorithmConfig(preset="grpo", advantage="gigpo"), max_total_tokens=512)


def test_the_example_agent_and_the_train_agent_command(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLES / "openai_agent.py"), "--model", "tiny-random", "--steps", "2", "--tasks-per-step", "2", "--group-size", "2"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("step ")] == ["1/2", "2/2"]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {i} * 3 + 1?", "answer": i * 3 + 1}) + "\n" for i in range(8)))
    command = [sys.executable, "-m", "agentic_rl", "train-agent", "openai_agent:agent", "--reward", "openai_agent:reward", "--tasks", str(tasks),
               "--output-dir", str(tmp_path / "run"), "--set", "model.name=tiny-random", "--set", "steps=1", "--set", "tasks_per_step=2", "--set", "group_size=2", "--set", "precision=fp32"]
    done = subprocess.run(command, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1 and (tmp_path / "run" / "final").is_dir()
    bad = subprocess.run([sys.executable, "-m", "agentic_rl", "train-agent", "nowhere:agent", "--tasks", str(tasks)], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "agent: cannot import 'nowhere:agent'" in bad.stderr + bad.stdout and "Traceback" not in bad.stderr

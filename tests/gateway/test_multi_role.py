"""Multi-agent programs through the gateway (issue 52, scope item 4): each call's ``model``
is its role; an episode's calls split by role into that role's samples; one group per
(task, role), so a role's advantages come from its own groups; per-role rewards (returned
or posted) reach their role and a missing role is refused; per-role metrics; a program
with one role is unchanged; the planner/solver example."""

from __future__ import annotations

import copy
import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openai")

from agentic_rl import agents  # noqa: E402
from agentic_rl.config import AlgorithmConfig, TrainConfig  # noqa: E402
from agentic_rl.gateway.agent_training import AgentSampler, RoleRewardError, evaluation_metrics  # noqa: E402
from agentic_rl.gateway.traces import Call, calls_by_role, calls_to_trajectories  # noqa: E402
from agentic_rl.rollout.roles import task_key  # noqa: E402
from agentic_rl.training.scoring import first_tasks, score  # noqa: E402
from agentic_rl.types import TrajectoryGroup  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TASKS = [{"id": f"t{i}", "question": f"What is {i} + {i}?"} for i in range(4)]
PLANNER_REWARDS = [1.0, 0.0, 1.0, 1.0]
"""Episode n's planner reward (episodes run one at a time, in order: task 0's two, then task 1's)."""
SOLVER_REWARDS = [0.0, 0.0, 1.0, 0.0]


def _config(rl: dict | None = None, **overrides) -> TrainConfig:
    data = {
        "model": {"name": "tiny-random", "device": "cpu"},
        "precision": "fp32",
        "rl": {"steps": 1, "tasks_per_step": 2, "group_size": 2, **(rl or {})},
        "rollout": {"max_new_tokens": 4, "max_total_tokens": 512},
        "optim": {"lr": 1e-3},
    }
    data.update(overrides)
    return TrainConfig.model_validate(data)


def two_roles(post=None):
    """A planner that rewrites its history once (two samples: a segment), then a solver
    whose second call continues its first (one two-turn sample). Returns the episode's
    number; ``post(n)``, when given, is the reward body the agent posts itself."""
    counter = itertools.count()

    def agent(task, client):
        n = next(counter)
        for text in (task["question"], f"Summary of attempt {n}. Plan again."):
            client.chat.completions.create(model="planner", messages=[{"role": "user", "content": text}], max_tokens=3)
        messages = [{"role": "system", "content": "You solve."}, {"role": "user", "content": "Solve it."}]
        first = client.chat.completions.create(model="solver", messages=messages, max_tokens=3)
        messages += [{"role": "assistant", "content": first.choices[0].message.content}]
        client.chat.completions.create(model="solver", messages=[*messages, {"role": "user", "content": "Check."}])
        if post is not None:
            url = str(client.base_url).rstrip("/").removesuffix("/v1") + "/reward"
            httpx.post(url, json=post(n), headers={"Authorization": f"Bearer {client.api_key}"}).raise_for_status()
        return n

    return agent


def by_episode(result, task) -> dict[str, float]:
    return {"planner": PLANNER_REWARDS[result], "solver": SOLVER_REWARDS[result]}


def _sample(server, agent, reward, tasks=(0, 1), group_size=2):
    sampler = AgentSampler(server, agent, TASKS, reward, concurrency=1)
    try:
        return sampler.sample(list(tasks), group_size, seed=0)
    finally:
        sampler.close()


def test_calls_split_by_role_into_token_exact_samples() -> None:
    def call(prompt: list[int], completion: list[int], role: str) -> Call:
        return Call(prompt, completion, [-0.5] * len(completion), 0, "stop", role=role)

    calls = [
        call([1, 2], [3, 4], "planner"),
        call([9], [8], "solver"),
        call([1, 2, 3, 4, 5], [6], "planner"),  # continues the planner's call across the solver's
        call([9, 8, 7], [6], "solver"),
        call([20], [21], "planner"),  # a rewritten history: a new sample
    ]
    split = calls_by_role(calls)
    assert list(split) == ["planner", "solver"] and [len(c) for c in split.values()] == [3, 2]
    planner = calls_to_trajectories(split["planner"], reward=1.0)
    solver = calls_to_trajectories(split["solver"], reward=0.0)
    assert [t.token_ids for t in planner] == [[1, 2, 3, 4, 5, 6], [20, 21]]
    assert planner[0].loss_mask == [0, 0, 1, 1, 0, 1] and len(planner[0].turns) == 2
    assert [t.token_ids for t in solver] == [[9, 8, 7, 6]] and solver[0].loss_mask == [0, 1, 0, 1]
    assert solver[0].sampler_logprobs == [0.0, -0.5, 0.0, -0.5]


def test_the_trace_records_each_calls_role(server) -> None:
    import openai

    episode = openai.OpenAI(base_url=server.episode_url("roles-1"), api_key="unused", max_retries=0)
    episode.chat.completions.create(model="planner", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    episode.completions.create(model="solver", prompt="2 + 2 =", max_tokens=2)
    trace = httpx.get(f"{server.url}/episodes/roles-1").json()
    assert [call["role"] for call in trace["calls"]] == ["planner", "solver"]
    assert [call.role for call in server.store.pop("roles-1").calls] == ["planner", "solver"]


def test_one_group_per_task_and_role_with_its_own_rewards_and_advantages(server) -> None:
    groups, metrics = _sample(server, two_roles(), by_episode)
    assert [g.group_id.split("@")[1] for g in groups] == ["planner", "solver", "planner", "solver"]
    assert [task_key(g) for g in groups][::2] == [task_key(g) for g in groups][1::2]
    assert len({task_key(g) for g in groups}) == 2 and [g.task_index for g in groups] == [0, 0, 1, 1]
    for group in groups:
        role = group.group_id.split("@")[1]
        assert len(group.trajectories) == 2
        for episode in group.trajectories:
            assert all(s.info["role"] == role and s.group_id == group.group_id for s in episode.samples)
            assert len(episode.segments) == (1 if role == "planner" else 0)
            assert role == "planner" or (len(episode.turns) == 2 and episode.loss_mask.count(0) > 0)
    assert [g.rewards for g in groups] == [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]]
    assert metrics == pytest.approx(
        {
            "agent_errors": 0.0,
            "calls_per_episode": 4.0,
            "samples_per_episode": 3.0,
            "reward_mean@planner": 0.75,
            "reward_mean@solver": 0.25,
            "samples_per_episode@planner": 2.0,
            "samples_per_episode@solver": 1.0,
            "calls_per_episode@planner": 2.0,
            "calls_per_episode@solver": 2.0,
        }
    )
    # GRPO within each role's group: rewards (1, 0) -> +-0.5 / std (unbiased std 1/sqrt 2);
    # (1, 1) and (0, 0) -> 0. Grouped by task alone, task 0's solver (0, 0) would be pushed
    # down by the planner's 1, and task 1's planner (1, 1) up by the solver's 0.
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = [[a, -a], [0.0, 0.0], [0.0, 0.0], [a, -a]]
    scored = score(groups, AlgorithmConfig(preset="grpo"), max_total_tokens=512)
    rows = {id(sample): row for sample, row in zip(scored.trajectories, scored.advantages)}
    assert len(rows) == 2 * (2 * 2 + 2)  # 2 tasks x (2 planner samples x 2 episodes + 1 solver sample x 2)
    for group, values in zip(groups, expected):
        for episode, value in zip(group.trajectories, values):
            for sample in episode.samples:
                assert rows[id(sample)] == pytest.approx([value * m for m in sample.loss_mask], abs=1e-5)


def test_a_reward_must_name_every_role(server) -> None:
    with pytest.raises(RoleRewardError, match=r"^reward\(result, task\): no reward for role 'solver'"):
        _sample(server, two_roles(), lambda result, task: {"planner": 1.0}, tasks=(0,), group_size=1)
    with pytest.raises(RoleRewardError, match="role 'solver': expected a number"):
        _sample(server, two_roles(), lambda result, task: {"planner": 1.0, "solver": "yes"}, tasks=(0,), group_size=1)


def test_posted_rewards_per_role_or_for_all(server) -> None:
    ignored = lambda result, task: 0.5  # noqa: E731  (a posted reward wins)
    per_role = two_roles(post=lambda n: {"reward": {"planner": 0.0, "solver": 1.0, "critic": 3.0}})
    groups, metrics = _sample(server, per_role, ignored, tasks=(0,))
    assert [g.rewards for g in groups] == [[0.0, 0.0], [1.0, 1.0]]
    assert metrics["reward_mean@solver"] == 1.0 and metrics["reward_mean@planner"] == 0.0
    groups, _ = _sample(server, two_roles(post=lambda n: {"reward": 0.25}), ignored, tasks=(0,))
    assert [g.rewards for g in groups] == [[0.25, 0.25], [0.25, 0.25]]
    with pytest.raises(RoleRewardError, match="^the posted reward: no reward for role 'solver'"):
        _sample(server, two_roles(post=lambda n: {"reward": {"planner": 1.0}}), ignored, tasks=(0,), group_size=1)
    writer = {"Authorization": f"Bearer {server.write_token}"}
    for bad in ({"planner": "1"}, {"planner": True}, {}):
        refused = httpx.post(f"{server.url}/episodes/e/reward", json={"reward": bad}, headers=writer)
        assert refused.status_code == 400 and "reward" in refused.json()["error"]["message"]


def one_call(model: str):
    def agent(task, client):
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": task["question"]}], max_tokens=3
        )
        return reply.choices[0].message.content

    return agent


def test_a_single_role_program_is_unchanged(server) -> None:
    for model in ("policy", "gpt-4o-mini"):
        groups, metrics = _sample(server, one_call(model), lambda result, task: 1.0)
        assert len(groups) == 2 and all("@" not in g.group_id and len(g.trajectories) == 2 for g in groups)
        assert all(t.group_id == g.group_id and t.info["role"] == model for g in groups for t in g.trajectories)
        assert metrics == {"agent_errors": 0.0, "calls_per_episode": 1.0, "samples_per_episode": 1.0}
        held_out = evaluation_metrics(groups, metrics, 2)
        assert {key for key in held_out if "@" in key} == {"avg@2", "pass@2"}
        assert held_out["num_tasks"] == 2 and held_out["avg@2"] == 1.0 and held_out["pass@2"] == 1.0


def test_a_step_counts_tasks_not_groups() -> None:
    groups = [TrajectoryGroup("", gid) for gid in ("a@planner", "a@solver", "b@solver", "c")]
    assert first_tasks(groups, 2) == (groups[:3], 2)
    assert first_tasks(groups, 5) == (groups, 3)
    assert first_tasks([], 2) == ([], 0)


def test_training_a_two_role_program(tiny) -> None:
    """A step of 2 tasks x 2 roles has 4 groups, all kept (not cut to 2 by counting groups as
    tasks), with per-role metrics; the policy updates."""
    alternate = lambda n, task: {"planner": float(n % 2 == 0), "solver": float(n % 2 == 1)}  # noqa: E731
    config = _config(algorithm={"preset": "grpo", "group_filter": "zero-variance"}, rl={"max_generation_rounds": 2})
    model = copy.deepcopy(tiny[0])
    step = agents.train(two_roles(), TASKS, alternate, config, concurrency=1, loaded=(model, tiny[1])).steps[0]
    assert step["groups_sampled"] == 4.0 and step["groups_kept"] == 4.0 and step["generation_rounds"] == 1.0
    assert step["reward_mean@planner"] == 0.5 and step["reward_mean@solver"] == 0.5
    assert step["samples_per_episode@planner"] == 2.0 and step["samples_per_episode"] == 3.0
    assert step["grad_norm"] > 0 and step["infra_errors"] == 0


def test_evaluate_reports_each_role(tiny) -> None:
    metrics = agents.evaluate(
        two_roles(), TASKS[:2], by_episode, _config(), k=2, concurrency=1, loaded=(copy.deepcopy(tiny[0]), tiny[1])
    )
    assert metrics["num_tasks"] == 2 and metrics["num_samples"] == 8 and metrics["num_samples@planner"] == 4
    assert metrics["avg@2@planner"] == 0.75 and metrics["pass@2@planner"] == 1.0
    assert metrics["avg@2@solver"] == 0.25 and metrics["pass@2@solver"] == 0.5
    assert metrics["mean_reward@planner"] == 0.75 and metrics["reward_mean@solver"] == 0.25


def test_the_planner_solver_example(server, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import multi_agent

    right = {"expression": "3 * 4 + 5", "answer": "<answer>17</answer>"}
    assert multi_agent.reward(right, {"answer": 17}) == {"planner": 1.0, "solver": 1.0}
    assert multi_agent.reward({**right, "expression": "3 * 4"}, {"answer": 17}) == {"planner": 0.0, "solver": 0.0}
    assert multi_agent.reward({**right, "answer": "<answer>12</answer>", "expression": "3*4"}, {"answer": 17}) == {
        "planner": 0.0,
        "solver": 1.0,
    }
    tasks = multi_agent.make_tasks(2, seed=0)
    sampler = AgentSampler(server, multi_agent.agent, tasks, multi_agent.reward, concurrency=2)
    try:
        groups, metrics = sampler.sample([0, 1], 2, seed=0)
    finally:
        sampler.close()
    assert [g.group_id.split("@")[1] for g in groups] == ["planner", "solver"] * 2
    assert metrics["agent_errors"] == 0.0 and metrics["calls_per_episode@planner"] == 1.0
    assert 1.0 <= metrics["calls_per_episode@solver"] <= 3.0
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "multi_agent.py"), "--model", "tiny-random", "--steps", "1"]
        + ["--tasks-per-step", "2", "--group-size", "2"],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split()[:4] for line in done.stdout.splitlines() if line.startswith("step ")] == [
        ["step", "1/1", "planner", "reward"]
    ]

"""Envs with roles: each role's turns make its own token-exact trajectory, one group per
task and role, per-role rewards, and the contract's errors."""

from __future__ import annotations

import json

import pytest
import torch

from agentic_rl.config import AlgorithmConfig, ConfigError, RolloutConfig, TrainConfig
from agentic_rl.engines.hf import HFBackend
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import make
from agentic_rl.envs.arithmetic_team import planned_expression
from agentic_rl.evaluation.harness import per_role_eval_metrics
from agentic_rl.rollout import rollout
from agentic_rl.rollout.roles import ROLE_SEPARATOR, episode_turns, role_metrics, task_key
from agentic_rl.training.collect import play_expert
from agentic_rl.training.preflight import check_roles
from agentic_rl.training.scoring import score

pytestmark = pytest.mark.usefixtures("one_thread")


def call(expression: str) -> str:
    return (
        "<tool_call>\n" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "\n</tool_call>"
    )


def template_ids(tokenizer, messages, *, add_generation_prompt: bool) -> list[int]:
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
    )


def team_script(tokenizer, plan: str = "2 + 3"):
    """The planner writes ``plan``; the solver calls the calculator on it, then answers its result."""

    def reply(prompt: list[int], _call: int) -> str:
        text = tokenizer.decode(prompt)
        if "You are the planner" in text:
            return plan
        return "<answer>5</answer>" if "<tool_response>\n5" in text else call(plan)

    return reply


def team(tokenizer, *, credit="role", plan="2 + 3", group_size=2):
    backend = ScriptedBackend(tokenizer, team_script(tokenizer, plan))
    limits = RolloutConfig(max_new_tokens=64, max_total_tokens=2048)
    return rollout(
        backend, lambda: make("arithmetic-team", credit=credit), [0, 1], group_size=group_size, config=limits, seed=0
    )


def test_one_group_per_task_and_role(tokenizer) -> None:
    groups = team(tokenizer)
    assert [g.group_id.split(ROLE_SEPARATOR)[1] for g in groups] == ["planner", "solver"] * 2
    assert [task_key(g) for g in groups][::2] == [task_key(g) for g in groups][1::2]
    assert [g.task_index for g in groups] == [0, 0, 1, 1]
    for group in groups:
        role = group.group_id.split(ROLE_SEPARATOR)[1]
        assert len(group.trajectories) == 2
        assert all(t.info["role"] == role and t.group_id == group.group_id for t in group.trajectories)
    planner, solver = groups[0].trajectories[0], groups[1].trajectories[0]
    assert planner.info["episode"] == solver.info["episode"]  # one episode, two roles
    assert (planner.num_turns, solver.num_turns) == (1, 2)


def test_each_role_is_token_exact_for_its_own_conversation(tokenizer) -> None:
    groups = team(tokenizer)
    for trajectory in (groups[0].trajectories[0], groups[1].trajectories[0]):
        rendered = template_ids(tokenizer, trajectory.messages, add_generation_prompt=False)
        assert trajectory.token_ids == rendered[: len(trajectory.token_ids)]
        assert trajectory.info.get("template_drift_tokens", 0) == 0
        sampled = [tokenizer.decode([i]) for i, m in zip(trajectory.token_ids, trajectory.loss_mask) if m]
        assert "".join(sampled).replace("<|im_end|>", "") == "".join(t.assistant_text for t in trajectory.turns)
    planner, solver = groups[0].trajectories[0], groups[1].trajectories[0]
    assert planner.messages[0]["content"].startswith("You are the planner")
    assert [m["role"] for m in planner.messages] == ["system", "user", "assistant"]
    assert solver.messages[0]["content"].startswith("You are the solver")
    assert solver.messages[1]["content"] == "What is 2 + 3?"
    assert "You are the planner" not in tokenizer.decode(solver.token_ids)  # each role sees only its own
    assert solver.prompt_length == len(template_ids(tokenizer, solver.messages[:2], add_generation_prompt=True))


def test_role_credit_and_shared_credit(tokenizer) -> None:
    role = team(tokenizer, credit="role")  # "2 + 3" is not the task's expression: the planner is wrong
    assert [t.reward for t in role[0].trajectories] == [0.0, 0.0]
    assert [t.reward for t in role[1].trajectories] == [1.0, 1.0]  # the solver answered its expression right
    assert [t.correct for g in role[:2] for t in g.trajectories] == [False, False, True, True]
    shared = team(tokenizer, credit="shared")  # the team's answer, 5, is wrong: nobody is rewarded
    assert {t.reward for g in shared for t in g.trajectories} == {0.0}


def test_not_an_expression_ends_the_episode_before_the_solver(tokenizer) -> None:
    groups = team(tokenizer, plan="I think the answer is large.")
    assert len(groups) == 2 and all(ROLE_SEPARATOR not in g.group_id for g in groups)  # one role acted
    assert all(t.info["role"] == "planner" and t.reward == 0.0 for g in groups for t in g.trajectories)


def test_expert_plays_every_role_right(tokenizer) -> None:
    from agentic_rl.chat import ChatRenderer

    played = play_expert(
        lambda: make("arithmetic-team"),
        5,
        limits=RolloutConfig(max_total_tokens=2048),
        renderer=ChatRenderer(tokenizer),
    )
    assert [t.info["role"] for t in played] == ["planner", "solver"]
    assert [t.reward for t in played] == [1.0, 1.0] and all(t.correct for t in played)
    assert planned_expression(played[0].turns[0].assistant_text) == played[1].messages[1]["content"][8:-1]


class Relay:
    """Two players take turns (a, b, a, b): each hears the other's last line; the env
    scores zero-sum at the end (a wins when its last line is longer)."""

    roles = ("a", "b")
    num_tasks = 2

    def __init__(self, bad: str | None = None) -> None:
        self.bad, self.turn, self.lines = bad, 0, []

    def reset(self, *, seed=None, options=None):
        self.turn, self.lines = 0, []
        return [{"role": "user", "content": "You are player a. Say something."}], {"task_id": "relay", "role": "a"}

    def step(self, message):
        self.lines.append(message["content"])
        self.turn += 1
        if self.turn == 4:
            a_wins = len(self.lines[2]) > len(self.lines[3])
            rewards = {"a": 1.0 if a_wins else -1.0, "b": -1.0 if a_wins else 1.0}
            if self.bad == "rewards":
                rewards = {"c": 1.0}
            return [], 0.0, True, False, {"role_rewards": rewards}
        role = "b" if self.turn % 2 else "a"
        if self.bad == "role":
            role = "referee"
        heard = {"role": "user", "content": f"The other player said: {message['content'][:40]}"}
        if self.turn == 1:  # b's conversation opens here
            return [{"role": "user", "content": "You are player b."}, heard], 0.0, False, False, {"role": role}
        return [heard], 0.0, False, False, {"role": role}


def relay(tiny, *, continuous: bool, bad: str | None = None):
    model, tokenizer = tiny
    limits = RolloutConfig(max_new_tokens=8, max_total_tokens=1024, continuous_batching=continuous)
    return rollout(HFBackend(model, tokenizer), lambda: Relay(bad), [0, 1], group_size=2, config=limits, seed=3)


@torch.no_grad()
def test_a_role_addressed_again_extends_its_own_sequence(tiny) -> None:
    model, tokenizer = tiny
    groups = relay(tiny, continuous=True)
    assert [g.group_id.split(ROLE_SEPARATOR)[1] for g in groups] == ["a", "b", "a", "b"]
    for group in groups:
        for trajectory in group.trajectories:
            assert trajectory.num_turns == 2 and not trajectory.segments and trajectory.infra_error is None
            opening = trajectory.messages[: 1 if group.group_id.endswith("@a") else 2]
            assert trajectory.token_ids[: trajectory.prompt_length] == template_ids(
                tokenizer, opening, add_generation_prompt=True
            )
            first, second = trajectory.turns  # one growing sequence: the turn, what it heard, the next turn
            assert (first.response_start, second.response_start) == (trajectory.prompt_length, first.observation_end)
            assert second.response_end == len(trajectory.token_ids)
            heard = tokenizer.decode(trajectory.token_ids[first.response_end : first.observation_end])
            assert "The other player said" in heard
            sampled = [
                first.response_start <= i < first.response_end or i >= second.response_start
                for i in range(len(trajectory.token_ids))
            ]
            assert trajectory.loss_mask == [int(x) for x in sampled]
        assert sorted(t.reward for t in group.trajectories) in ([-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0])
    for a, b in zip(groups[0].trajectories, groups[1].trajectories):
        assert a.reward == -b.reward  # zero-sum
    # The continuous scheduler (one decode session, sequences re-submitted on a switch)
    # samples what the per-turn one does.
    per_turn = relay(tiny, continuous=False)
    assert [t.token_ids for g in per_turn for t in g.trajectories] == [
        t.token_ids for g in groups for t in g.trajectories
    ]


def test_the_envs_mistakes_are_infrastructure_errors(tiny) -> None:
    for bad, words in (("role", "env named role 'referee'"), ("rewards", "role_rewards")):
        groups = relay(tiny, continuous=False, bad=bad)
        errors = {t.infra_error for g in groups for t in g.trajectories}
        assert len(errors) == 1 and words in errors.pop()


def test_role_metrics_and_per_role_advantages(tokenizer) -> None:
    groups = team(tokenizer, group_size=2)
    metrics = role_metrics(groups, episode_turns(groups))
    assert metrics["reward_mean@planner"] == 0.0 and metrics["reward_mean@solver"] == 1.0
    assert metrics["calls_per_episode@planner"] == 1.0 and metrics["calls_per_episode@solver"] == 2.0
    held_out = per_role_eval_metrics(groups, k=1)
    assert held_out["num_tasks"] == 2.0 and held_out["avg@1@solver"] == 1.0 and held_out["avg@1@planner"] == 0.0
    groups[1].trajectories[0].reward = 0.0  # one solver episode fails: GRPO compares it with the other solver's only
    batch = score(groups, AlgorithmConfig(preset="grpo"), max_total_tokens=2048)
    values = [(t.info["role"], t.group_id, max(row, key=abs)) for t, row in zip(batch.trajectories, batch.advantages)]
    first_task = groups[0].group_id.split(ROLE_SEPARATOR)[0]
    solver = sorted(v for role, group, v in values if role == "solver" and group.startswith(first_task))
    assert solver == pytest.approx([-0.7071, 0.7071], abs=1e-3)  # (r - mean) / std over that task's solver group
    assert {v for role, _, v in values if role == "planner"} == {0.0}  # the planners' group is all 0: no signal


def test_preflight_refuses_what_assumes_one_conversation() -> None:
    check_roles(TrainConfig(), ())
    check_roles(TrainConfig(), ("planner", "solver"))
    for key, value in (("rl.sampling", "arpo"), ("rollout.context", "window")):
        section, field = key.split(".")
        config = TrainConfig.model_validate({section: {field: value}})
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            check_roles(config, ("planner", "solver"))


def test_check_env_reads_the_roles() -> None:
    from agentic_rl.envs.base import EnvCheckError, check_env

    check_env(make("arithmetic-team"))
    relay = Relay()
    relay.roles = ("a", "a")
    with pytest.raises(EnvCheckError, match="distinct"):
        check_env(relay)
    with pytest.raises(EnvCheckError, match="role 'referee' is not one of env.roles"):
        check_env(Relay(bad="role"))


class Orchestra:
    """An orchestrator whose tool is a worker: each call runs a fresh worker conversation
    (``new_conversation``) whose answer comes back as the call's result; the outcome is shared."""

    roles = ("orchestrator", "worker")
    num_tasks = 1

    def reset(self, *, seed=None, options=None):
        self.calls = 0
        return [{"role": "user", "content": "Ask the worker twice, then answer."}], {"role": "orchestrator"}

    def step(self, message):
        if message["content"].startswith("ASK"):
            self.calls += 1
            question = [{"role": "user", "content": f"Worker, question {self.calls}: {message['content'][4:]}"}]
            return question, 0.0, False, False, {"role": "worker", "new_conversation": True}
        if message["content"].startswith("WORK"):
            result = {"role": "user", "content": f"The worker says: {message['content']}"}
            return [result], 0.0, False, False, {"role": "orchestrator"}
        return [], float(self.calls == 2), True, False, {}


def test_a_sub_agent_called_again_starts_a_fresh_conversation(tokenizer) -> None:
    def reply(prompt: list[int], _call: int) -> str:
        text = tokenizer.decode(prompt)
        if "Worker, question" in text:
            return "WORK done " + text.split("question ")[-1][:1]
        return "ASK something" if text.count("The worker says") < 2 else "FINAL"

    groups = rollout(ScriptedBackend(tokenizer, reply), Orchestra, [0], group_size=1, config=RolloutConfig(), seed=0)
    orchestrator, worker = (g.trajectories[0] for g in groups)
    assert [g.group_id.split(ROLE_SEPARATOR)[1] for g in groups] == ["orchestrator", "worker"]
    assert orchestrator.num_turns == 3 and not orchestrator.segments  # one growing conversation
    assert [t.assistant_text for t in orchestrator.turns] == ["ASK something", "ASK something", "FINAL"]
    assert len(worker.samples) == 2  # two calls, two conversations: each a sample of the worker
    for number, sample in enumerate(worker.samples, 1):
        assert [m["content"] for m in sample.messages] == [
            f"Worker, question {number}: something",
            f"WORK done {number}",
        ]
        assert sample.token_ids[: sample.prompt_length] == template_ids(
            tokenizer, sample.messages[:1], add_generation_prompt=True
        )
        assert (sample.reward, sample.group_id, sample.info["role"]) == (1.0, groups[1].group_id, "worker")

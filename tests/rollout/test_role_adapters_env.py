"""``lora.roles`` with an env's roles: each role's turns are sampled by its own adapter
(the scheduler splits a turn's batch by adapter), its samples train that adapter, the
cold start seeds every role from the shared one, and what cannot run stops in preflight."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from agentic_rl.config import ConfigError, RolloutConfig, TrainConfig, build
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import make
from agentic_rl.models import load
from agentic_rl.models.lora import (
    SHARED_ADAPTER,
    adapter_for_role,
    add_role_adapters,
    apply_lora,
    seed_role_adapters,
    snapshot_due,
)
from agentic_rl.rollout import rollout
from agentic_rl.rollout.roles import ROLE_SEPARATOR
from agentic_rl.rollout.schedulers import run_continuous, scheduler_for
from agentic_rl.training.preflight import check_roles

pytestmark = pytest.mark.usefixtures("one_thread")


def team_script(tokenizer, plan: str):
    """The planner writes ``plan``; the solver calls the calculator on it, then answers 5."""
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "' + plan + '"}}\n</tool_call>'

    def reply(prompt: list[int], _call: int) -> str:
        text = tokenizer.decode(prompt)
        if "You are the planner" in text:
            return plan
        return "<answer>5</answer>" if "<tool_response>\n5" in text else call

    return reply


ROLES = {"planner": "own", "solver": "frozen"}


class AdapterRecordingBackend(ScriptedBackend):
    """The scripted team, recording which adapter was selected for each prompt it samples."""

    def __init__(self, tokenizer, script) -> None:
        super().__init__(tokenizer, script)
        self.adapter = SHARED_ADAPTER
        self.sampled_by: list[tuple[str, str]] = []  # (adapter, the prompt's text)
        self.adapter_for = partial(adapter_for_role, ROLES)

    def select_adapter(self, name: str) -> None:
        self.adapter = name

    def generate(self, prompts, sampling, *, stop_token_ids, max_new_tokens=None):
        self.sampled_by += [(self.adapter, self.tokenizer.decode(prompt)) for prompt in prompts]
        return super().generate(prompts, sampling, stop_token_ids=stop_token_ids, max_new_tokens=max_new_tokens)


def test_each_roles_turns_are_sampled_by_its_adapter(tokenizer) -> None:
    backend = AdapterRecordingBackend(tokenizer, team_script(tokenizer, "2 + 3"))
    limits = RolloutConfig(max_new_tokens=64, max_total_tokens=2048, continuous_batching=True)
    groups = rollout(backend, lambda: make("arithmetic-team"), [0, 1], group_size=2, config=limits, seed=0)
    # Planner prompts went out with the planner's adapter, solver prompts with the frozen one.
    assert backend.sampled_by
    for adapter, prompt in backend.sampled_by:
        assert adapter == ("planner" if "You are the planner" in prompt else "frozen"), adapter
    assert {a for a, _ in backend.sampled_by} == {"planner", "frozen"}
    # Every sample says which role it played: what the trainer picks its adapter by.
    for group in groups:
        role = group.group_id.split(ROLE_SEPARATOR)[1]
        assert all(s.info["role"] == role for t in group.trajectories for s in t.samples)


def test_splitting_a_turn_by_adapter_samples_what_one_batch_samples(tokenizer) -> None:
    """Each row draws from its own seed: routed through two adapters (that here sample
    alike) the episodes come out token for token as from one batch."""
    limits = RolloutConfig(max_new_tokens=64, max_total_tokens=2048, continuous_batching=False)
    plain = ScriptedBackend(tokenizer, team_script(tokenizer, "2 + 3"))
    routed = AdapterRecordingBackend(tokenizer, team_script(tokenizer, "2 + 3"))
    one, two = (
        rollout(backend, lambda: make("arithmetic-team"), [0, 1], group_size=2, config=limits, seed=0)
        for backend in (plain, routed)
    )
    assert [[t.token_ids for t in g.trajectories] for g in one] == [[t.token_ids for t in g.trajectories] for g in two]


def test_the_cold_start_seeds_every_trained_role_from_the_shared_adapter() -> None:
    config = build(
        TrainConfig,
        {
            "model": {"name": "tiny-random"},
            "env": {"name": "arithmetic-team"},
            "lora": {"enabled": True, "roles": {"planner": "own", "solver": "frozen", "critic": "snapshot"}},
        },
    )
    model, _ = load("tiny-random")
    model = add_role_adapters(apply_lora(model.float(), config.lora), config.lora)
    parameters = dict(model.named_parameters())
    shared = {k: p for k, p in parameters.items() if ".lora_B." in k and f".{SHARED_ADAPTER}." in k}
    with torch.no_grad():
        for p in shared.values():
            p.add_(0.5)  # what a cold start would leave in the shared adapter
    assert seed_role_adapters(model, config.lora) > 0
    for key, value in shared.items():
        assert torch.equal(parameters[key.replace(f".{SHARED_ADAPTER}.", ".planner.")], value)
        assert torch.equal(parameters[key.replace(f".{SHARED_ADAPTER}.", ".snapshot.")], value)
        assert not parameters[key.replace(f".{SHARED_ADAPTER}.", ".frozen.")].any()  # frozen stays the base


def test_snapshot_due_every_snapshot_every_steps() -> None:
    lora = build(TrainConfig, {"lora": {"enabled": True, "roles": {"b": "snapshot"}, "snapshot_every": 3}}).lora
    assert [snapshot_due(lora, step) for step in range(1, 7)] == [False, False, True, False, False, True]
    assert not snapshot_due(build(TrainConfig, {"lora": {"enabled": True, "roles": {"b": "own"}}}).lora, 3)


def _config(**overrides) -> TrainConfig:
    base = {"env": {"name": "arithmetic-team"}, "lora": {"enabled": True, "roles": {"planner": "own"}}}
    for key, value in overrides.items():
        base[key] = {**base.get(key, {}), **value}
    return build(TrainConfig, base)


def test_preflight_takes_roles_of_the_env_and_refuses_the_rest() -> None:
    check_roles(_config(), ("planner", "solver"))  # accepted
    with pytest.raises(ConfigError, match=r"^lora.roles.judge: not a role of env arithmetic-team \(its roles: "):
        check_roles(_config(lora={"roles": {"judge": "own"}}), ("planner", "solver"))
    with pytest.raises(ConfigError, match="^lora.roles: for envs with roles; env arithmetic has one role$"):
        check_roles(_config(env={"name": "arithmetic"}), ())
    with pytest.raises(ConfigError, match="^trainer.strategy: not with lora.roles"):
        check_roles(_config(trainer={"strategy": "fsdp2"}), ("planner", "solver"))


def test_a_run_with_an_adapter_per_env_role_saves_each_roles_adapter(tmp_path) -> None:
    from agentic_rl.training.pipeline import train

    result = train(
        {
            "model": {"name": "tiny-random"},
            "env": {"name": "arithmetic-team"},
            "lora": {"enabled": True, "roles": {"planner": "own", "solver": "own"}},
            "rollout": {"max_new_tokens": 8, "max_total_tokens": 1024},
            "eval": {"num_tasks": 2},
            "sft": {"enabled": False},
            "rl": {"steps": 1, "tasks_per_step": 1, "group_size": 2},
            "output_dir": str(tmp_path / "run"),
        }
    )
    adapters = result.run_dir / "final" / "adapters"
    assert (adapters / "adapter_config.json").is_file()  # the shared one
    assert {p.name for p in adapters.iterdir() if p.is_dir()} == {"planner", "solver"}
    assert len(result.steps) == 1 and set(result.evals) == {"before", "after"}


class WriteAndReview:
    """Two roles, any text accepted: a writer's turn, then a reviewer's (its own
    conversation), so that a random model plays both."""

    roles = ("writer", "reviewer")
    num_tasks = 8

    def reset(self, *, seed=None, options=None):
        self.task, self.draft = (options or {}).get("task_index", 0), None
        return [{"role": "user", "content": f"Write line {self.task}."}], {"role": "writer"}

    def step(self, message):
        if self.draft is None:
            self.draft = message["content"]
            review = [{"role": "user", "content": f"Review this line: {self.draft}"}]
            return review, 0.0, False, False, {"role": "reviewer", "new_conversation": True}
        return [], 1.0, True, False, {}


def test_continuous_batching_samples_each_role_with_its_adapter_as_the_per_turn_path_does(tiny) -> None:
    """One decode session per adapter: the same tokens as the per-turn path's split turns
    (each row keeps its own seed), and other tokens than the shared adapter alone samples."""
    from agentic_rl.engines.hf import HFBackend

    roles = {"writer": "own", "reviewer": "frozen"}
    lora = build(TrainConfig, {"lora": {"enabled": True, "roles": roles}}).lora
    model = add_role_adapters(apply_lora(load("tiny-random", device="cpu")[0].float(), lora), lora)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # the shared and the writer's adapters sample differently from each other and the base
        for key, parameter in model.named_parameters():
            if ".lora_B." in key and ".frozen." not in key:
                parameter.copy_(torch.randn(parameter.shape, generator=generator))

    def sample(*, continuous: bool, routed: bool = True) -> list[list[int]]:
        backend = HFBackend(model, tiny[1], batch_size=4)
        backend.adapter_for = partial(adapter_for_role, roles) if routed else None
        assert (scheduler_for(backend, continuous_batching=continuous) is run_continuous) == continuous
        limits = RolloutConfig(max_new_tokens=6, max_total_tokens=1024, continuous_batching=continuous)
        groups = rollout(backend, WriteAndReview, [0, 1, 2], group_size=2, config=limits, seed=0)
        assert {t.info["role"] for g in groups for t in g.trajectories} == {"writer", "reviewer"}
        return [t.token_ids for g in groups for t in g.trajectories]

    continuous = sample(continuous=True)
    assert continuous == sample(continuous=False)
    assert continuous != sample(continuous=True, routed=False)

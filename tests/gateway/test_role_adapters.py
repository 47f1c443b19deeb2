"""Roles with policies of their own (issue 52, scope item 2; ``lora.roles``): a LoRA adapter
per ``own`` role on the shared base, trained only on that role's samples and serving only
that role's calls; ``frozen`` roles served by the base model and never trained; every
other role on the shared adapter."""

from __future__ import annotations

import itertools

import pytest
import torch

pytest.importorskip("openai")
pytest.importorskip("peft")

from agentic_rl import agents  # noqa: E402
from agentic_rl.config import ConfigError, LoraConfig, TrainConfig, build  # noqa: E402
from agentic_rl.models import load  # noqa: E402
from agentic_rl.models.lora import (  # noqa: E402
    FROZEN_ADAPTER,
    SHARED_ADAPTER,
    adapter_for_role,
    add_role_adapters,
    apply_lora,
    select_adapter,
)

pytestmark = pytest.mark.usefixtures("one_thread")
ROLES = {"planner": "own", "judge": "frozen"}
ROLE_ADAPTERS = (SHARED_ADAPTER, "planner", FROZEN_ADAPTER)
TASKS = [{"id": f"t{i}", "question": f"What is {i} + {i}?"} for i in range(4)]


def _lora_model():
    model, tokenizer = load("tiny-random", device="cpu")
    lora = LoraConfig(enabled=True, r=4, alpha=8, roles=ROLES)
    return add_role_adapters(apply_lora(model, lora), lora), tokenizer


def _adapter_state(model, name: str) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if f".{name}." in k and ".lora_" in k}


def test_one_adapter_per_own_role_one_frozen_and_all_trainable() -> None:
    model, _ = _lora_model()
    assert sorted(model.peft_config) == [SHARED_ADAPTER, FROZEN_ADAPTER, "planner"]
    assert [adapter_for_role(ROLES, r) for r in ("planner", "judge", "solver", None)] == [
        "planner",
        FROZEN_ADAPTER,
        SHARED_ADAPTER,
        SHARED_ADAPTER,
    ]
    select_adapter(model, "planner")
    lora = [p for k, p in model.named_parameters() if ".lora_" in k]
    assert model.active_adapter == "planner" and lora and all(p.requires_grad for p in lora)
    ids = torch.randint(0, 1000, (1, 12))
    with torch.no_grad(), model.disable_adapter():
        base = model(ids).logits
    select_adapter(model, FROZEN_ADAPTER)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, base)  # the frozen adapter is the base model exactly


@pytest.mark.parametrize(
    "data, message",
    [
        ({"lora": {"roles": {"planner": "own"}}}, "lora.roles: the roles' adapters .* need lora.enabled"),
        ({"lora": {"enabled": True, "roles": {"default": "own"}}}, "role 'default'"),
        ({"lora": {"enabled": True, "roles": {"a.b": "frozen"}}}, "role 'a.b'"),
        ({"lora": {"enabled": True, "roles": {"p": "own"}}, "backend": {"kind": "sglang"}}, "backend.kind sglang"),
    ],
)
def test_bad_role_settings_are_one_line(data, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build(TrainConfig, data)


def test_env_training_takes_only_the_envs_roles() -> None:
    from agentic_rl.training.preflight import preflight

    config = build(TrainConfig, {"model": {"name": "tiny-random"}, "lora": {"enabled": True, "roles": ROLES}})
    with pytest.raises(ConfigError, match="^lora.roles: for envs with roles; env arithmetic has one role$"):
        preflight(config, check_model=False)


def three_roles():
    """A planner (its own adapter), a solver (the shared one) and a judge (frozen) per episode."""
    counter = itertools.count()

    def agent(task, client):
        n = next(counter)
        for role in ("planner", "solver", "judge"):
            client.chat.completions.create(
                model=role, messages=[{"role": "user", "content": f"{role}: {task['question']}"}], max_tokens=4
            )
        return n

    return agent


def reward(n, task):  # varies within each group (episodes run in order): every step has an advantage
    return {"planner": float(n % 2), "solver": float((n // 2) % 2 == n % 2)}


def _train_config(tmp_path) -> dict:
    """Two steps on the tiny model, checkpointed after the first (updates on every step)."""
    return {
        "model": {"name": "tiny-random", "device": "cpu"},
        "precision": "fp32",
        "lora": {"enabled": True, "r": 4, "alpha": 8, "roles": ROLES},
        "rl": {"steps": 2, "tasks_per_step": 2, "group_size": 2, "skip_zero_advantage": False},
        "rollout": {"max_new_tokens": 4, "max_total_tokens": 512},
        "optim": {"lr": 5e-2},
        "output_dir": str(tmp_path),
        "checkpoint_every": 1,
        "tracking": {"sinks": []},
    }


def test_each_role_trains_and_serves_its_own_adapter(tmp_path) -> None:
    config = _train_config(tmp_path)
    result = agents.train(three_roles(), TASKS, reward, config, concurrency=1, loaded=load("tiny-random", device="cpu"))
    for step in result.steps:
        # Each role's calls were sampled by the adapter that scores them: the trainer's
        # log-probs equal the sampler's (the adapters differ by step 2: a wrong one would show).
        assert step["rollout_logprob_diff_max"] < 1e-4, step
        assert "reward_mean@planner" in step and "reward_mean@solver" in step and "reward_mean@judge" not in step
    # LoRA's B starts at zero: the trained adapters moved, the frozen one is still the base
    # (a checkpoint keeps every adapter; final/ merges the shared one).
    from safetensors.torch import load_file

    checkpoint = sorted(result.output_dir.rglob("step-*/model.safetensors"))[-1]
    saved = load_file(str(checkpoint))
    b = {name: [v for k, v in saved.items() if f"lora_B.{name}." in k] for name in ROLE_ADAPTERS}
    assert all(any(v.abs().sum() > 0 for v in b[name]) for name in (SHARED_ADAPTER, "planner"))
    assert b[FROZEN_ADAPTER] and all(v.abs().sum() == 0 for v in b[FROZEN_ADAPTER])
    assert any(not torch.allclose(x, y) for x, y in zip(b[SHARED_ADAPTER], b["planner"], strict=True))  # trained apart
    adapters = result.output_dir / "final" / "adapters"
    assert (adapters / "adapter_config.json").is_file() and (adapters / "planner" / "adapter_config.json").is_file()
    assert not (adapters / "judge").exists() and not (adapters / FROZEN_ADAPTER).exists()


def test_a_resumed_run_goes_on_with_every_adapter(tmp_path) -> None:
    from safetensors.torch import load_file

    config = _train_config(tmp_path)
    first = agents.train(three_roles(), TASKS, reward, config, concurrency=1, loaded=load("tiny-random", device="cpu"))
    saved = load_file(str(next(first.output_dir.rglob("step-000001/model.safetensors"))))
    resumed = agents.train(
        three_roles(),
        TASKS,
        reward,
        {"rl": {"steps": 3}},
        resume=first.output_dir,
        concurrency=1,
        loaded=load("tiny-random", device="cpu"),
    )
    assert [int(step["step"]) for step in resumed.steps] == [0, 1, 2]  # from the step-1 checkpoint
    # The resumed steps sampled each role with its checkpointed adapter: no sampler/trainer mismatch.
    assert all(step["rollout_logprob_diff_max"] < 1e-4 for step in resumed.steps[1:])
    assert any("lora_B.planner." in key and value.abs().sum() > 0 for key, value in saved.items())


def test_checkpoints_carry_every_adapter(tmp_path) -> None:
    from agentic_rl.training.checkpoint import load_checkpoint, save_checkpoint

    model, _ = _lora_model()
    with torch.no_grad():
        for key, value in model.named_parameters():
            if "lora_B.planner." in key:
                value.fill_(0.5)
    folder = save_checkpoint(tmp_path, 1, model=model, trainer_state={}, info={}, keep=1)
    fresh, _ = _lora_model()
    load_checkpoint(folder, model=fresh)
    for name in ROLE_ADAPTERS:
        mine, theirs = _adapter_state(model, name), _adapter_state(fresh, name)
        assert mine and all(torch.equal(mine[k], theirs[k]) for k in mine), name


def test_a_snapshot_role_plays_the_shared_policy_as_of_its_last_copy(tmp_path) -> None:
    from safetensors.torch import load_file

    from agentic_rl.models.lora import SNAPSHOT_ADAPTER, frozen, refresh_snapshot

    roles = {"planner": "own", "judge": "snapshot"}
    assert adapter_for_role(roles, "judge") == SNAPSHOT_ADAPTER
    lora = LoraConfig(enabled=True, r=4, alpha=8, roles=roles)
    model = add_role_adapters(apply_lora(load("tiny-random", device="cpu")[0], lora), lora)
    with torch.no_grad():
        for key, value in model.named_parameters():
            if f"lora_B.{SHARED_ADAPTER}." in key:
                value.fill_(0.25)
    snapshot_b = [v for k, v in _adapter_state(model, SNAPSHOT_ADAPTER).items() if "lora_B" in k]
    assert snapshot_b and all(v.abs().sum() == 0 for v in snapshot_b)  # B = 0: the base until copied
    assert refresh_snapshot(model) > 0
    shared, snapshot = _adapter_state(model, SHARED_ADAPTER), _adapter_state(model, SNAPSHOT_ADAPTER)
    assert shared and all(
        torch.equal(v, snapshot[k.replace(f".{SHARED_ADAPTER}.", f".{SNAPSHOT_ADAPTER}.")]) for k, v in shared.items()
    )
    assert refresh_snapshot(_lora_model()[0]) == 0  # no snapshot role: nothing to copy

    config = _train_config(tmp_path)
    config["lora"] = {**config["lora"], "roles": roles, "snapshot_every": 1}
    assert frozen(build(TrainConfig, config).lora) == ["judge"]  # served, never trained: no samples, no reward
    result = agents.train(three_roles(), TASKS, reward, config, concurrency=1, loaded=load("tiny-random", device="cpu"))
    assert all("reward_mean@judge" not in step for step in result.steps)
    saved = load_file(str(next(result.output_dir.rglob("step-000001/model.safetensors"))))
    shared_b = {k: v for k, v in saved.items() if f"lora_B.{SHARED_ADAPTER}." in k}
    assert any(v.abs().sum() > 0 for v in shared_b.values())  # trained at step 1, then copied: the judge plays it
    assert all(
        torch.equal(v, saved[k.replace(f".{SHARED_ADAPTER}.", f".{SNAPSHOT_ADAPTER}.")]) for k, v in shared_b.items()
    )

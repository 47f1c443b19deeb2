"""``agentic-rl eval --adapters``: a run's role adapters loaded back on its base sample each
role as the run did (same logits per adapter; the run's own held-out evaluation
reproduced), and what cannot be evaluated stops with one line before the model loads."""

from __future__ import annotations

import json

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config import ConfigError, EvalConfig, TrainConfig, build
from agentic_rl.evaluation.harness import prepare
from agentic_rl.models import load
from agentic_rl.models.lora import (
    FROZEN_ADAPTER,
    ROLES_FILE,
    SHARED_ADAPTER,
    add_role_adapters,
    apply_lora,
    load_role_adapters,
    save_role_adapters,
    select_adapter,
)

pytestmark = pytest.mark.usefixtures("one_thread")

ROLES = {"planner": "own", "solver": "frozen", "judge": "snapshot"}


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_loaded_adapters_give_each_role_the_logits_it_was_trained_to(tmp_path) -> None:
    lora = build(TrainConfig, {"lora": {"enabled": True, "roles": ROLES}}).lora
    trained = add_role_adapters(apply_lora(load("tiny-random", device="cpu")[0].float(), lora), lora)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # every adapter a different policy (B starts at zero: all would be the base)
        for key, parameter in trained.named_parameters():
            if ".lora_B." in key and f".{FROZEN_ADAPTER}." not in key:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    save_role_adapters(trained, lora, tmp_path, base="tiny-random")
    assert json.loads((tmp_path / ROLES_FILE).read_text()) == {"base": "tiny-random", "roles": ROLES}

    loaded, roles = load_role_adapters(load("tiny-random", device="cpu")[0].float(), tmp_path)
    assert roles == ROLES
    ids = torch.tensor([[1, 5, 9, 42, 7, 3]])
    base = _logits(load("tiny-random", device="cpu")[0].float(), ids)
    seen = {}
    for name in (SHARED_ADAPTER, "planner", "snapshot", FROZEN_ADAPTER):
        select_adapter(trained, name)
        select_adapter(loaded, name)
        seen[name] = _logits(loaded, ids)
        torch.testing.assert_close(seen[name], _logits(trained, ids), msg=name)
    torch.testing.assert_close(seen[FROZEN_ADAPTER], base)  # the frozen role plays the base
    assert not torch.allclose(seen["planner"], seen[SHARED_ADAPTER], atol=1e-3)
    assert not torch.allclose(seen["snapshot"], seen["planner"], atol=1e-3)


def test_eval_with_a_runs_adapters_reproduces_its_held_out_evaluation(tmp_path, capsys) -> None:
    from agentic_rl.training.pipeline import train

    result = train(
        {
            "model": {"name": "tiny-random"},
            "precision": "fp32",
            "env": {"name": "arithmetic-team"},
            "lora": {"enabled": True, "roles": {"planner": "own", "solver": "frozen"}},
            "optim": {"lr": 0.05},  # one step that moves the planner's adapter off the base
            "rollout": {"max_new_tokens": 8, "max_total_tokens": 1024},
            "eval": {"num_tasks": 3},
            "sft": {"enabled": False},
            "rl": {"steps": 1, "tasks_per_step": 1, "group_size": 2},
            "output_dir": str(tmp_path / "run"),
        }
    )
    after = json.loads((result.run_dir / "eval_after.json").read_text())
    adapters = result.run_dir / "final" / "adapters"
    output = tmp_path / "eval.json"
    argv = ["eval", "--adapters", str(adapters), "--env", "arithmetic-team", "--num-tasks", "3", "--k", "1"]
    argv += ["--output", str(output), "--set", "precision=fp32", "--set", "rollout.temperature=0"]
    argv += ["--set", "rollout.max_new_tokens=8", "--set", "rollout.max_total_tokens=1024"]
    assert main(argv) == 0
    assert "evaluating tiny-random on arithmetic-team" in capsys.readouterr().err
    again = json.loads(output.read_text())

    def sampled(evaluation) -> list[tuple]:
        return sorted((t["task_id"], json.dumps(t["messages"])) for t in evaluation["trajectories"])

    assert sampled(again) == sampled(after)
    assert again["metrics"] == after["metrics"]


def test_the_folders_base_is_the_model_and_each_role_routes_to_its_adapter(tmp_path) -> None:
    lora = build(TrainConfig, {"lora": {"enabled": True, "roles": {"planner": "own"}}}).lora
    model = add_role_adapters(apply_lora(load("tiny-random", device="cpu")[0].float(), lora), lora)
    save_role_adapters(model, lora, tmp_path, base="tiny-random")
    prepared = prepare({"adapters": str(tmp_path), "env": {"name": "arithmetic-team"}, "num_tasks": 1})
    assert prepared.config.model.name == "tiny-random"  # the folder's base, unless one is given
    assert prepared.backend.adapter_for("planner") == "planner"
    assert prepared.backend.adapter_for("solver") == SHARED_ADAPTER


def test_what_cannot_be_evaluated_stops_with_one_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match=rf"^adapters: {tmp_path} has no {ROLES_FILE} \(expected a run's"):
        prepare({"adapters": str(tmp_path), "env": {"name": "arithmetic-team"}, "num_tasks": 1})
    (tmp_path / ROLES_FILE).write_text(json.dumps({"base": "tiny-random", "roles": {"judge": "own"}}))
    with pytest.raises(
        ConfigError,
        match=r"^adapters: role judge of .* is not a role of env arithmetic-team \(its roles: planner, solver\)",
    ):
        prepare({"adapters": str(tmp_path), "env": {"name": "arithmetic-team"}, "num_tasks": 1})
    with pytest.raises(
        ConfigError, match=r"^adapters: role judge of .* is not a role of env arithmetic \(it has one role\)"
    ):
        prepare({"adapters": str(tmp_path), "env": {"name": "arithmetic"}, "num_tasks": 1})
    (tmp_path / ROLES_FILE).write_text(json.dumps({"base": "tiny-random", "roles": {"planner": "own"}}))
    with pytest.raises(ConfigError, match=r"^adapters: .* lacks the adapter of planner"):
        prepare({"adapters": str(tmp_path), "env": {"name": "arithmetic-team"}, "num_tasks": 1})
    (tmp_path / ROLES_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match=r"is not a roles file \(expected base and roles\)$"):
        prepare({"adapters": str(tmp_path), "env": {"name": "arithmetic-team"}, "num_tasks": 1})
    with pytest.raises(ConfigError, match=r"adapters: sampled by the hf engine only, not backend.kind openai"):
        build(
            EvalConfig, {"adapters": str(tmp_path), "backend": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"}}
        )

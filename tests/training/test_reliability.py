"""Checkpoint/resume after SIGKILL, partial checkpoints, numerical guards, infra-failure skips."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from agentic_rl.training import checkpoint as checkpoint_module
from agentic_rl.training.checkpoint import COMPLETE, complete_checkpoints

STEPS = 4


def _recipe(path: Path) -> Path:
    recipe = {
        "description": "resume test",
        "model": {"name": "tiny-random", "device": "cpu"},
        "precision": "fp32",  # bit-identical resume is the fp32 guarantee (auto may pick bf16 on a fast-bf16 CPU)
        "env": {"name": "arithmetic", "max_turns": 2},
        "rollout": {"max_new_tokens": 8, "max_total_tokens": 512},
        "eval": {"num_tasks": 2},
        "optim": {"lr": 1e-3},
        "rl": {"steps": STEPS, "tasks_per_step": 2, "group_size": 2},
        "checkpoint_every": 1,
        "keep_checkpoints": 2,
    }
    path.write_text(yaml.safe_dump(recipe))
    return path


# Runs the CLI with the checkpoint writer slowed down while it writes step 3's
# checkpoint, so a SIGKILL can land in the middle of a checkpoint deterministically.
_SLOW_CHECKPOINT = """
import sys, time
import agentic_rl.training.checkpoint as checkpoint
original = checkpoint.save_file
def slow_save_file(tensors, path, *args, **kwargs):
    original(tensors, path, *args, **kwargs)
    if ".tmp-step-000003" in str(path):
        time.sleep(60)
checkpoint.save_file = slow_save_file
from agentic_rl.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cli(*args: str, slow_checkpoint: bool = False) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # identical float reductions in every process
    program = ["-c", _SLOW_CHECKPOINT] if slow_checkpoint else ["-m", "agentic_rl"]
    return subprocess.Popen(
        [sys.executable, *program, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _kill_when(process: subprocess.Popen, ready) -> None:
    deadline = time.monotonic() + 240
    while not ready():
        assert process.poll() is None, process.stdout.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "final" / "model.safetensors")


def _wait(process: subprocess.Popen, timeout: float = 240) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output.decode()[-2000:]
    return output.decode()


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_gives_the_same_weights_and_metrics(tmp_path) -> None:
    recipe = _recipe(tmp_path / "recipe.yaml")
    _wait(_cli("train", str(recipe), "--output-dir", str(tmp_path / "straight")))

    interrupted = tmp_path / "interrupted"
    checkpoints = interrupted / "checkpoints"
    # 1. SIGKILL mid-run, right after step 2's checkpoint is complete.
    _kill_when(
        _cli("train", str(recipe), "--output-dir", str(interrupted)),
        lambda: (checkpoints / "step-000002" / COMPLETE).is_file(),
    )
    assert not (interrupted / "final").exists()
    # 2. Resume, then SIGKILL in the middle of writing step 3's checkpoint (weights written, not yet marked or renamed).
    _kill_when(
        _cli("train", "--resume", str(interrupted), slow_checkpoint=True),
        lambda: any((p / "model.safetensors").is_file() for p in checkpoints.glob(".tmp-step-000003-*")),
    )
    assert [p.name for p in complete_checkpoints(checkpoints)][-1] == "step-000002"
    (checkpoints / "step-000009").mkdir()  # an unmarked folder is never trusted either
    # 3. Resume again from the last complete checkpoint and finish.
    _wait(_cli("train", "--resume", str(interrupted)))

    straight, resumed = _final_weights(tmp_path / "straight"), _final_weights(interrupted)
    assert straight.keys() == resumed.keys()
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name
    import json

    from agentic_rl.training.rl_metrics import MACHINE_METRICS

    def metrics(run: Path) -> list[dict]:
        return [
            {k: v for k, v in json.loads(line).items() if k not in MACHINE_METRICS}
            for line in (run / "metrics.jsonl").read_text().splitlines()
        ]

    assert metrics(tmp_path / "straight") == metrics(interrupted)
    assert len(metrics(interrupted)) == STEPS


def test_checkpoint_retention_keeps_newest_complete(tmp_path, tiny) -> None:
    model, _ = tiny
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        trainer_state = {
            "step": step,
            "task_schedule": {"epoch": 0, "position": step},
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
        }
        checkpoint_module.save_checkpoint(
            root, step, model=model, trainer_state=trainer_state, info={"tracking": {}}, keep=2
        )
    assert [p.name for p in complete_checkpoints(root)] == ["step-000002", "step-000003"]
    (root / "step-000004").mkdir()  # no completion marker: never chosen
    assert complete_checkpoints(root)[-1].name == "step-000003"
    state, info = checkpoint_module.load_checkpoint(root / "step-000003", model=model)
    assert state["step"] == 3 and state["task_schedule"]["position"] == 3 and info["step"] == 3
    optimizer.load_state_dict(state["optimizer"])


def test_resume_without_checkpoint_is_a_clear_error(tmp_path, capsys) -> None:
    from agentic_rl.cli import main

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("rl:\n  steps: 1\n")
    assert main(["train", "--resume", str(tmp_path / "run")]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "nowhere")]) == 2


def test_nonfinite_losses_skip_updates_then_stop(tiny, monkeypatch) -> None:
    from test_rl_trainer import _config, _trainer

    from agentic_rl.algorithms import POLICY_LOSSES
    from agentic_rl.training import rl

    trainer = _trainer(tiny, _config(rl={"max_nonfinite_steps": 2}))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    original = POLICY_LOSSES[trainer.config.algorithm.policy_loss.name]

    @functools.wraps(original)  # the registry reads the wrapped loss's parameters
    def poisoned(*args, **kwargs):
        out = original(*args, **kwargs)
        out.loss = out.loss * float("nan")
        return out

    monkeypatch.setitem(POLICY_LOSSES, trainer.config.algorithm.policy_loss.name, poisoned)
    metrics, _ = trainer.step()
    assert metrics["skipped_nonfinite"] == 1.0
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
    with pytest.raises(rl.NonFiniteError, match="2 non-finite"):
        trainer.step()
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_too_many_infrastructure_failures_skip_the_update(tiny) -> None:
    from test_rl_trainer import ParityEnv, _config, _trainer

    class Broken(ParityEnv):
        def step(self, message):
            raise ConnectionError("tool server down")

    trainer = _trainer(tiny, _config())
    trainer.make_env = Broken
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    metrics, groups = trainer.step()
    assert metrics["skipped_infra"] == 1.0 and metrics["infra_errors"] == 16
    assert all(t.infra_error and t.termination_reason == "error" for g in groups for t in g.trajectories)
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())

"""The launcher's pieces that need no processes: the torchrun command, and the settings
refused on several processes (one line, exit code 2, before anything starts)."""

from __future__ import annotations

import sys

import pytest

from agentic_rl.cli import main
from agentic_rl.config import TrainConfig, check_world_size
from agentic_rl.distributed.launch import torchrun_command


def test_torchrun_command_drops_the_launcher_flags() -> None:
    command = torchrun_command(
        ["train", "smoke", "--nproc", "2", "--max-restarts=1", "--set", "rl.steps=3"],
        nproc=2,
        max_restarts=1,
        recipe="smoke",
        fixed_output_dir=False,
    )
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert command[3:] == [
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "-m",
        "agentic_rl",
        "train",
        "smoke",
        "--set",
        "rl.steps=3",
    ]


def test_restartable_runs_get_a_fixed_output_dir() -> None:
    command = torchrun_command(
        ["train", "my.yaml", "--nproc=4"], nproc=4, max_restarts=2, recipe="configs/my.yaml", fixed_output_dir=True
    )
    assert command[-2] == "--output-dir" and command[-1].startswith("runs/my-")
    assert "--nproc=4" not in command


def test_single_is_refused_on_several_processes() -> None:
    config = TrainConfig.model_validate({"trainer": {"strategy": "single"}})
    check_world_size(config, 1)  # fine in one process
    with pytest.raises(ValueError, match="trainer.strategy: 'single' runs one process"):
        check_world_size(config, 2)


@pytest.mark.parametrize(
    "overrides",
    [
        {"rl": {"sampling": "arpo", "arpo": {"initial_samples": 2}, "group_size": 2}},
        {"algorithm": {"preset": "ppo"}},
    ],
)
def test_arpo_and_a_critic_run_on_several_processes(overrides: dict) -> None:
    check_world_size(TrainConfig.model_validate(overrides), 2)


def test_fsdp2_takes_a_critic_and_lora() -> None:
    config = TrainConfig.model_validate({"trainer": {"strategy": "fsdp2"}, "algorithm": {"preset": "ppo"}})
    assert config.algorithm.critic.kind == "shared"
    TrainConfig.model_validate({"trainer": {"strategy": "fsdp2"}, "lora": {"enabled": True}})


def test_cli_refuses_before_launching(capsys) -> None:
    assert main(["train", "smoke", "--nproc", "2", "--set", "trainer.strategy=single"]) == 2
    error = capsys.readouterr().err.strip()
    assert (
        error
        == "agentic-rl: error: trainer.strategy: 'single' runs one process; with 2 processes use ddp or fsdp2 (or auto)"
    )
    assert main(["train", "smoke", "--nproc", "0"]) == 2

"""The trainer group's rendezvous variables (distributed/ray_trainers.py): what torchrun
would set for ranks placed on Ray nodes."""

from __future__ import annotations

from agentic_rl.distributed.ray_trainers import rank_environments


def test_ranks_on_two_nodes_get_torchrun_variables() -> None:
    envs = rank_environments(["10.0.0.1", "10.0.0.1", "10.0.0.2"], 29500, gpus=False)
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"}
    assert {e["MASTER_ADDR"] for e in envs} == {"10.0.0.1"} and {e["MASTER_PORT"] for e in envs} == {"29500"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0"]
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["2", "2", "1"]


def test_gpu_ranks_each_see_their_own_device_zero() -> None:
    """Ray gives each GPU actor only its own GPU (CUDA_VISIBLE_DEVICES): it is cuda:0 there."""
    envs = rank_environments(["a", "a"], 1234, gpus=True)
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0"] and [e["LOCAL_WORLD_SIZE"] for e in envs] == ["1", "1"]

"""Data-parallel training equals one process: a 2-rank DDP and a 2-rank FSDP2 update (torchrun,
gloo on CPU) on the same global batch give the loss, metrics and updated weights of the
single-process update. Four optimizer steps (2 PPO epochs x 2 mini-batches) of uneven
shares (9 trajectories over 2 ranks), so old log-probs, padding micro-batches and the
once-per-step gradient sync are all exercised."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("parity_worker.py")

LR = 1e-3
WEIGHT_TOLERANCE = 5e-5
"""Max |w_ranks - w_single| after 4 AdamW steps at lr 1e-3. The ranks sum the same
per-token losses in another order (float32 rounding, ~1e-7 relative on the gradients);
Adam divides each gradient by its own running scale, so an element whose gradient is
near zero can move by a visible fraction of lr: measured 1.5e-7 (DDP) and 8.4e-6 (FSDP2,
whose reduce-scatter sums in yet another order), bounded here by 5% of lr."""


def _run(strategy: str, out: Path, ranks: int, *extra: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if ranks == 1:
        command = [sys.executable, str(WORKER), strategy, str(out), *extra]
    else:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            str(WORKER),
            strategy,
            str(out),
            *extra,
        ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict:
    return _run("single", tmp_path_factory.mktemp("single") / "out.pt", 1)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_update_like_one_process(strategy: str, single: dict, tmp_path) -> None:
    ranks = _run(strategy, tmp_path / "out.pt", 2)
    assert ranks["world_size"] == 2
    assert ranks["metrics"]["loss"] == pytest.approx(single["metrics"]["loss"], rel=1e-5, abs=1e-7)
    for key in (
        "entropy",
        "clip_frac_low",
        "clip_frac_high",
        "kl",
        "approx_kl",
        "ratio_mean",
        "grad_norm",
        "rollout_is_weight_mean",
    ):
        assert ranks["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-4, abs=1e-6), key
    assert ranks["weights"].keys() == single["weights"].keys()
    for name, value in single["weights"].items():
        torch.testing.assert_close(ranks["weights"][name], value, rtol=0, atol=WEIGHT_TOLERANCE)
    # The update moved the weights by far more than the tolerance ...
    from agentic_rl.models import load

    initial = dict(load("tiny-random", device="cpu")[0].named_parameters())
    assert (
        max(float((value - initial[name]).abs().max()) for name, value in single["weights"].items())
        > 50 * WEIGHT_TOLERANCE
    )  # measured: 4e-3 (4 steps of lr 1e-3)
    # ... and the engine samples from exactly the trained weights (fsdp2: its gathered copy; ddp: the shared model).
    for name, value in ranks["weights"].items():
        assert torch.equal(ranks["engine"][name], value), name


@pytest.fixture(scope="module")
def single_lora(tmp_path_factory) -> dict:
    return _run("single", tmp_path_factory.mktemp("single-lora") / "out.pt", 1, "lora")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_lora_updates_like_one_process(strategy: str, single_lora: dict, tmp_path) -> None:
    """LoRA adapters (the only trainable weights) under DDP and FSDP2 (frozen base shards);
    the KL reference is the base with adapters off (under FSDP2 through the sharded forward)."""
    single = single_lora
    ranks = _run(strategy, tmp_path / "ranks.pt", 2, "lora")
    assert ranks["metrics"]["loss"] == pytest.approx(single["metrics"]["loss"], rel=1e-5, abs=1e-7)
    assert ranks["metrics"]["kl"] == pytest.approx(single["metrics"]["kl"], rel=1e-4, abs=1e-7)
    adapters = [name for name in single["weights"] if "lora_" in name]
    assert adapters
    for name, value in single["weights"].items():
        torch.testing.assert_close(ranks["weights"][name], value, rtol=0, atol=WEIGHT_TOLERANCE)


@pytest.mark.slow
def test_role_adapters_update_like_one_process(tmp_path) -> None:
    """An adapter per role (``lora.roles``) under DDP: each rank's micro-batches train one
    adapter or the other, so gradients accumulate locally and are averaged once per step;
    the weights are one process's, and each role's adapter moved on its own samples."""
    single = _run("single", tmp_path / "single.pt", 1, "lora-roles")
    ranks = _run("ddp", tmp_path / "ranks.pt", 2, "lora-roles")
    assert ranks["metrics"]["loss"] == pytest.approx(single["metrics"]["loss"], rel=1e-5, abs=1e-7)
    for name, value in single["weights"].items():
        torch.testing.assert_close(ranks["weights"][name], value, rtol=0, atol=WEIGHT_TOLERANCE)
    moved = {
        role: max(float(v.abs().max()) for k, v in single["weights"].items() if f".lora_B.{role}." in k)
        for role in ("planner", "solver", "default")
    }
    assert min(moved["planner"], moved["solver"]) > 20 * WEIGHT_TOLERANCE  # measured 4e-3 and 2e-3
    assert moved["default"] == 0.0  # no sample without a role: the shared adapter is untouched


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "variant"),
    [
        ("ddp", "critic-shared"),
        ("ddp", "critic-separate"),
        ("fsdp2", "critic-shared"),
        ("fsdp2", "critic-separate"),
        ("fsdp2", "kl-reward"),
        ("ddp", "kl-reward"),
    ],
)
def test_critic_and_kl_reward_update_like_one_process(strategy: str, variant: str, tmp_path) -> None:
    """PPO's value head on the policy (the wrapper syncs the backbone; the head's gradients
    are averaged beside it; under FSDP2 the pre-update values come from the sharded policy
    forward) and a separate critic copy (DDP: averaged; FSDP2: sharded like the policy);
    the KL-in-reward reference pass (under FSDP2 a sharded frozen copy, run in lockstep)."""
    single = _run("single", tmp_path / "single.pt", 1, variant)
    ranks = _run(strategy, tmp_path / "ranks.pt", 2, variant)
    assert ranks["metrics"]["loss"] == pytest.approx(single["metrics"]["loss"], rel=1e-5, abs=1e-7)
    for key in ("value_loss", "kl") if variant.startswith("critic") else ("entropy",):
        assert ranks["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-4, abs=1e-6), key
    for name, value in single["weights"].items():
        torch.testing.assert_close(ranks["weights"][name], value, rtol=0, atol=WEIGHT_TOLERANCE)
    assert ranks["critic"].keys() == single["critic"].keys()
    for name, value in single["critic"].items():
        torch.testing.assert_close(ranks["critic"][name], value, rtol=0, atol=WEIGHT_TOLERANCE)
    if variant.startswith("critic"):  # the value head trained (it starts at zero)
        assert float(single["critic"]["head.linear.bias"].abs()) > 50 * WEIGHT_TOLERANCE


@pytest.mark.slow
def test_sft_on_two_ranks_updates_like_one_process(tmp_path) -> None:
    """SFT under DDP: each rank trains on its share of every batch, normalised by the whole
    batch's tokens; the losses and the weights are those of one process."""
    single = _run("single", tmp_path / "single.pt", 1, "sft")
    ranks = _run("ddp", tmp_path / "ranks.pt", 2, "sft")
    assert ranks["metrics"]["steps"] == single["metrics"]["steps"] == 2
    assert ranks["metrics"]["loss"] == pytest.approx(single["metrics"]["loss"], rel=1e-5)
    for name, value in single["weights"].items():
        torch.testing.assert_close(ranks["weights"][name], value, rtol=0, atol=WEIGHT_TOLERANCE)


@pytest.mark.slow
def test_dpo_on_two_ranks_updates_like_one_process(tmp_path) -> None:
    """DPO under DDP: each rank trains on its share of every batch of pairs, weighted by the
    whole batch; losses, margins and weights are those of one process."""
    single = _run("single", tmp_path / "single.pt", 1, "dpo")
    ranks = _run("ddp", tmp_path / "ranks.pt", 2, "dpo")
    assert ranks["metrics"]["steps"] == single["metrics"]["steps"] == 2
    assert ranks["metrics"]["loss"] == pytest.approx(single["metrics"]["loss"], rel=1e-5)
    assert sorted(ranks["metrics"]["margins"]) == pytest.approx(
        sorted(single["metrics"]["margins"]), rel=1e-4, abs=1e-6
    )
    assert ranks["metrics"]["accuracies"] == single["metrics"]["accuracies"]
    for name, value in single["weights"].items():
        torch.testing.assert_close(ranks["weights"][name], value, rtol=0, atol=WEIGHT_TOLERANCE)

"""DDP's and FSDP2's wrappers at world size 1 give the unwrapped step: gloo on the CPU
here, NCCL where a GPU is present (benchmarks/gpu_check.py runs this file there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("wrapper_worker.py")
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]

TOLERANCE = {"fp32": 1e-5, "bf16-mixed": 2e-2}
"""Relative gradient error. fp32: the same products in the same order. bf16-mixed: the
unwrapped step computes under bf16 autocast, FSDP2 casts the parameters to bf16 once and
reduces float32 gradients: the same bf16 inputs to the products, other rounding around
them (measured below 1e-2)."""


@pytest.fixture(scope="module", params=DEVICES)
def results(request, tmp_path_factory) -> dict:
    """Every strategy x precision on ``device``, in one worker process (startup dominates)."""
    store = tmp_path_factory.mktemp("store") / "store"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(WORKER), request.param, str(store)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {"device": request.param, **json.loads(done.stdout.strip().splitlines()[-1])}


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_one_rank_wrapper_steps_like_no_wrapper(results, strategy, precision):
    result = results[f"{strategy}-{precision}"]
    assert result["backend"] == ("nccl" if results["device"] == "cuda" else "gloo")
    assert result["loss"] == pytest.approx(result["plain_loss"], rel=TOLERANCE[precision])
    assert result["grad_rel_error"] < TOLERANCE[precision], result
    # AdamW's first step moves each weight by lr (1e-3) in its gradient's sign: fp32 gives
    # the same step; under bf16 a near-zero gradient may flip sign, at most 2 lr apart.
    assert result["weight_max_diff"] < (1e-6 if precision == "fp32" else 2.1e-3), result


@pytest.mark.parametrize("torch_213", [True, False])
def test_ddp_turns_off_forward_buffer_sync_by_the_name_torch_knows(monkeypatch, torch_213):
    """PyTorch 2.13 renamed ``broadcast_buffers`` to ``forward_sync_buffers``; 2.11 (the GPU
    image of 2026-11-28) refused the new name, so the wrapper asks the signature."""
    from torch.nn import parallel

    from agentic_rl.distributed.context import DistContext
    from agentic_rl.distributed.strategy import DDPStrategy

    seen = {}

    class New:
        def __init__(self, module, device_ids=None, broadcast_buffers=True, forward_sync_buffers=None):
            seen.update(broadcast_buffers=broadcast_buffers, forward_sync_buffers=forward_sync_buffers)

    class Old:
        def __init__(self, module, device_ids=None, broadcast_buffers=True):
            seen.update(broadcast_buffers=broadcast_buffers)

    monkeypatch.setattr(parallel, "DistributedDataParallel", New if torch_213 else Old)
    DDPStrategy(DistContext()).wrap(torch.nn.Linear(2, 2), [])
    assert seen == (
        {"broadcast_buffers": True, "forward_sync_buffers": False} if torch_213 else {"broadcast_buffers": False}
    )

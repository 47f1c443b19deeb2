"""One training step of the tiny model through a trainer strategy's wrapper on a one-rank
process group (nccl on a GPU, gloo on the CPU), against the same step without a wrapper.
Run by ``tests/distributed/test_wrappers_one_rank.py``; prints the differences as JSON.

    python wrapper_worker.py DEVICE STORE_FILE     (every strategy x precision, one JSON line)

A one-rank group is what a machine with one GPU can run of the multi-GPU path: DDP's
all-reduce and FSDP2's all-gather / reduce-scatter over NCCL, its bf16 parameter casts and
float32 gradient reduction, at world size 1. (The trainer itself treats one process as
the degenerate case and wraps nothing, so this reaches the wrappers directly.)
"""

from __future__ import annotations

import copy
import json
import sys

import torch
import torch.distributed as dist

from agentic_rl.distributed.context import DistContext
from agentic_rl.distributed.strategy import DDPStrategy, FSDP2Strategy
from agentic_rl.models import load, split_model
from agentic_rl.models.precision import set_compute_precision
from agentic_rl.training.logprobs import PolicyLogprobs
from agentic_rl.training.optim import make_optimizer


def step(root, model, ids, mask):
    optimizer = make_optimizer(model.parameters(), lr=1e-3)
    logprobs, _ = root(ids, mask, mask)
    loss = -logprobs.sum() / mask.sum()
    loss.backward()
    grads = {
        name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().float().cpu()
        for name, p in model.named_parameters()
    }
    optimizer.step()
    weights = {
        name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().cpu()
        for name, p in model.named_parameters()
    }
    return float(loss), grads, weights


def main() -> None:
    device, store_file = sys.argv[1:3]
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, store=dist.FileStore(store_file, 1), rank=0, world_size=1)
    results = {}
    for strategy_name in ("ddp", "fsdp2"):
        for precision in ("fp32", "bf16-mixed"):
            model, _ = load("tiny-random", device=device)
            set_compute_precision(model, precision)
            model.train()
            plain = copy.deepcopy(model)
            context = DistContext(rank=0, world_size=1)
            strategy = DDPStrategy(context) if strategy_name == "ddp" else FSDP2Strategy(context, precision=precision)
            wrapped = strategy.wrap(PolicyLogprobs(model), list(split_model(model)[0].layers))
            generator = torch.Generator().manual_seed(0)
            ids = torch.randint(0, model.config.vocab_size, (4, 64), generator=generator).to(device)
            mask = torch.ones_like(ids)
            loss, grads, weights = step(wrapped, model, ids, mask)
            plain_loss, plain_grads, plain_weights = step(PolicyLogprobs(plain), plain, ids, mask)
            names = list(plain_grads)
            results[f"{strategy_name}-{precision}"] = {
                "backend": dist.get_backend(),
                "loss": loss,
                "plain_loss": plain_loss,
                "grad_rel_error": max(
                    float((grads[n] - plain_grads[n]).norm() / plain_grads[n].norm().clamp_min(1e-12)) for n in names
                ),
                "weight_max_diff": max(float((weights[n] - plain_weights[n]).abs().max()) for n in names),
            }
    print(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

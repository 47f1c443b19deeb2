"""One RL update on a fixed global batch, run by ``tests/distributed/test_parity.py``: in one
process (strategy single) or on every rank of a torchrun group (ddp / fsdp2). Writes the
loss and the updated weights (rank 0) to OUT.pt.

    python parity_worker.py STRATEGY OUT.pt [VARIANT]     (under torchrun for ddp / fsdp2)

VARIANT: lora (adapters only, KL to the adapters-off base), lora-roles (an adapter per
role, ``lora.roles``: the groups alternate between two roles, so each rank's micro-batches
train one adapter or the other), critic-shared / critic-separate
(PPO with GAE and a value head on the policy / on its own copy), kl-reward (REINFORCE++:
the KL to the reference is in the reward, computed before the update), sft (two SFT
steps of five conversations each: uneven shares, several micro-batches per rank), dpo
(likewise for two DPO steps of five pairs).
"""

from __future__ import annotations

import os
import sys

import torch

from agentic_rl import envs
from agentic_rl.config import TrainConfig
from agentic_rl.distributed import init_distributed, shutdown
from agentic_rl.engines.hf import HFBackend
from agentic_rl.models import load
from agentic_rl.rollout import rollout
from agentic_rl.training.rl import RLTrainer

ALGORITHMS = {
    "": {"preset": "grpo-tcr", "kl": {"coef": 0.01}},
    "lora": {"preset": "grpo-tcr", "kl": {"coef": 0.01}},
    "lora-roles": {"preset": "grpo-tcr"},
    "critic-shared": {"preset": "ppo", "critic": {"lr": 1e-3}},
    "critic-separate": {"preset": "ppo", "critic": {"kind": "separate", "lr": 1e-3}},
    "kl-reward": {"preset": "reinforce++"},
}


def sft(out: str) -> None:
    from agentic_rl.config import SFTConfig
    from agentic_rl.training.sft import train_sft

    torch.set_num_threads(1)
    dist = init_distributed(timeout_s=120)
    model, tokenizer = load("tiny-random", device="cpu")
    examples = [
        {
            "messages": [
                {"role": "user", "content": f"What is {a} + {a * 3}? " * (1 + a % 3)},
                {"role": "assistant", "content": f"<answer>{a * 4}</answer>"},
            ]
        }
        for a in range(10)
    ]
    config = SFTConfig(epochs=1, batch_size=5, micro_batch_tokens=64, lr=1e-3, warmup_steps=0)
    result = train_sft(model, tokenizer, examples, config, dist=dist)
    if dist.is_main:
        weights = {name: value.detach().clone() for name, value in model.named_parameters()}
        torch.save(
            {
                "metrics": {"loss": result.losses, "steps": result.steps},
                "weights": weights,
                "critic": {},
                "world_size": dist.world_size,
            },
            out,
        )
    shutdown()


def dpo(out: str) -> None:
    from agentic_rl.config import DPOConfig
    from agentic_rl.training.dpo import train_dpo

    torch.set_num_threads(1)
    dist = init_distributed(timeout_s=120)
    model, tokenizer = load("tiny-random", device="cpu")
    pairs = [
        {
            "prompt": [{"role": "user", "content": f"What is {a} + {a * 3}? " * (1 + a % 3)}],
            "chosen": [{"role": "assistant", "content": f"<answer>{a * 4}</answer>"}],
            "rejected": [{"role": "assistant", "content": f"<answer>{a * 4 + 1 + a}</answer>"}],
        }
        for a in range(10)
    ]
    config = DPOConfig(epochs=1, batch_size=5, micro_batch_tokens=128, lr=1e-3, warmup_steps=0)
    result = train_dpo(model, tokenizer, pairs, config, dist=dist)
    if dist.is_main:
        weights = {name: value.detach().clone() for name, value in model.named_parameters()}
        metrics = {
            "loss": result.losses,
            "steps": result.steps,
            "margins": result.margins,
            "accuracies": result.accuracies,
        }
        torch.save({"metrics": metrics, "weights": weights, "critic": {}, "world_size": dist.world_size}, out)
    shutdown()


def main(strategy: str, out: str, variant: str = "") -> None:
    if variant == "sft":
        return sft(out)
    if variant == "dpo":
        return dpo(out)
    lora = variant in ("lora", "lora-roles")
    roles = {"planner": "own", "solver": "own"} if variant == "lora-roles" else {}
    torch.set_num_threads(1)
    dist = init_distributed(timeout_s=120)
    config = TrainConfig.model_validate(
        {
            "model": {"name": "tiny-random", "device": "cpu"},
            "precision": "fp32",
            "trainer": {"strategy": strategy},
            "rollout": {"max_new_tokens": 10, "max_total_tokens": 512, "temperature": 1.0},
            "rl": {
                "steps": 1,
                "tasks_per_step": 3,
                "group_size": 3,
                "epochs": 2,
                "mini_batches": 2,
                "micro_batch_tokens": 64,
            },
            "optim": {"lr": 1e-3},
            "checkpoint_every": 0,
            "algorithm": ALGORITHMS[variant],
            "lora": {"enabled": lora, "r": 4, "roles": roles},
        }
    )
    model, tokenizer = load("tiny-random", device="cpu")
    make_env = lambda: envs.make("arithmetic", max_turns=1)  # noqa: E731
    # The same global batch on every rank and in the single process: sampled before any wrapping.
    sampler = HFBackend(model, tokenizer)
    groups = rollout(sampler, make_env, [0, 1, 2], group_size=3, config=config.rollout, seed=7)
    for group in groups:  # rewards with variance, so every group has advantages
        for j, trajectory in enumerate(group.trajectories):
            trajectory.reward = float(j)
            if roles:  # planner, solver, planner: each role's samples train its own adapter
                trajectory.info["role"] = ("planner", "solver")[groups.index(group) % 2]
    if lora:
        from agentic_rl.models.lora import add_role_adapters, apply_lora

        torch.manual_seed(0)  # the adapters' initialisation, the same in every process
        model = add_role_adapters(apply_lora(model, config.lora), config.lora)
    backend = HFBackend(model, tokenizer, own_copy=strategy == "fsdp2")
    trainer = RLTrainer(config, model, tokenizer, backend, make_env, [0, 1, 2], dist=dist)
    if roles:
        from agentic_rl.models.lora import adapter_for_role

        trainer.adapter_of = lambda t: adapter_for_role(roles, t.info.get("role"))
    scored, _, _ = trainer.score_groups(groups)  # with the critic's values / the reward KL where the variant uses them
    metrics = trainer.update(scored)
    weights = trainer.strategy.full_weights(model)
    weights = {
        name: value.detach().clone()
        for name, value in (weights.items() if isinstance(weights, dict) else model.named_parameters())
    }
    trainer.backend.sync_weights(trainer.strategy.full_weights(model))
    engine = {name: value.detach().clone() for name, value in backend.model.named_parameters()}
    critic = {}
    if trainer.critic is not None:  # full tensors (a sharded critic's gathered: a collective)
        from torch.distributed.tensor import DTensor

        critic = {
            name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for name, p in trainer.critic.module.named_parameters()
        }
    if dist.is_main:
        torch.save(
            {"metrics": metrics, "weights": weights, "engine": engine, "critic": critic, "world_size": dist.world_size},
            out,
        )
    shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *sys.argv[3:])
    # The work is done and written: leave without running C++ static destructors at
    # interpreter exit, where a rank occasionally aborted ("terminate called without an
    # active exception", about one run in a dozen on a loaded 2-core machine) after the
    # process group was destroyed, failing a run whose result was already complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

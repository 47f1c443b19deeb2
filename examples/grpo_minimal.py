"""GRPO from the library's pieces, top to bottom: the whole RL loop in one readable file.

    python examples/grpo_minimal.py                                # the embedded SmolLM2-135M on CPU
    python examples/grpo_minimal.py --model tiny-random --steps 2  # a seconds-long smoke run (CI)

One step: sample a group of episodes per task with the rollout engine (token ids exactly as
sampled, with the sampler's log-probs and a loss mask), score them with the env's verifiable
reward, turn rewards into GRPO advantages, take the clipped policy loss on the trainer's
log-probs, and step the optimizer. ``agentic-rl train`` does the same with everything around
it (SFT cold start, checkpoints, metrics, reports); this file shows how the pieces compose.
"""

from __future__ import annotations

import argparse

import torch

from agentic_rl import envs
from agentic_rl.algorithms import AdvantageInputs, compute_advantages, compute_policy_loss
from agentic_rl.config import RolloutConfig
from agentic_rl.engines.hf import HFBackend
from agentic_rl.models import load
from agentic_rl.rollout import rollout
from agentic_rl.training.batch import collate
from agentic_rl.training.logprobs import token_logprobs


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="smollm2-135m", help="built-in name (smollm2-135m, tiny-random) or a Hugging Face folder"
    )
    parser.add_argument("--steps", type=int, default=8, help="RL steps")
    parser.add_argument("--tasks-per-step", type=int, default=4, help="tasks (groups) per step")
    parser.add_argument("--group-size", type=int, default=8, help="samples per task (G)")
    parser.add_argument("--lr", type=float, default=2e-6, help="AdamW learning rate")
    parser.add_argument("--few-shot", type=int, default=4, help="solved demonstrations shown before each question")
    parser.add_argument("--eval-tasks", type=int, default=32, help="held-out test tasks scored before and after")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="most tokens per assistant turn")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def accuracy(engine, make_env, num_tasks: int, limits: RolloutConfig, seed: int) -> float:
    """Greedy accuracy on the first ``num_tasks`` tasks of ``make_env``'s split."""
    greedy = limits.model_copy(update={"temperature": 0.0})
    groups = rollout(engine, make_env, range(num_tasks), config=greedy, seed=seed)
    return sum(t.correct for g in groups for t in g.trajectories) / num_tasks


def grpo_step(model, tokenizer, optimizer, groups, *, temperature: float) -> dict[str, float]:
    """One GRPO update on sampled groups; returns what happened."""
    # Episodes whose env or tool crashed are the infrastructure's fault: they leave the loss.
    trajectories = [t for g in groups for t in g.trajectories if t.infra_error is None]
    group_of = {g.group_id: i for i, g in enumerate(groups)}
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)  # [B]
    group_index = torch.tensor([group_of[t.group_id] for t in trajectories])  # [B]

    # Pad the token-exact trajectories into [B, T] tensors. loss_mask is 1 on tokens the
    # policy sampled and 0 on the prompt and on tool observations.
    batch = collate(
        [t.token_ids for t in trajectories],
        [t.loss_mask for t in trajectories],
        pad_token_id=tokenizer.pad_token_id,
        per_token={"sampler_logprobs": [t.sampler_logprobs for t in trajectories]},
    )

    # GRPO: (r - mean of the group) / (std of the group), on every sampled token -> [B, T].
    advantages = compute_advantages(
        "grpo", AdvantageInputs(rewards=rewards, response_mask=batch.loss_mask, group_index=group_index)
    )

    # The trainer's log-probs of the sampled tokens (same temperature as the sampler), and the
    # clipped surrogate against the sampler's log-probs (clip-higher: 1 - 0.2 .. 1 + 0.28).
    model.train()
    logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.loss_mask, temperature=temperature)
    out = compute_policy_loss(
        "ppo-clip",
        logprobs,
        batch.per_token["sampler_logprobs"],
        advantages,
        batch.loss_mask,
        clip_low=0.2,
        clip_high=0.28,
        aggregation="token-mean",
    )
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    model.eval()
    return {
        "reward": float(rewards.mean()),
        "solved": sum(t.correct for t in trajectories) / max(len(trajectories), 1),
        "loss": float(out.loss.detach()),
        "grad_norm": float(grad_norm),
        "clip_frac_high": out.metrics["clip_frac_high"],
    }


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)

    # The policy, in float32 (master weights), and the in-process engine that shares it: a
    # training step's new weights are what the next rollout samples from.
    model, tokenizer = load(args.model)
    model = model.float().eval()
    engine = HFBackend(model, tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)

    # Arithmetic with a calculator tool: the reward is 1 for the right final answer.
    train_env = lambda: envs.make("arithmetic", split="train", few_shot=args.few_shot, max_turns=3)  # noqa: E731
    test_env = lambda: envs.make("arithmetic", split="test", few_shot=args.few_shot, max_turns=3)  # noqa: E731
    limits = RolloutConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, max_total_tokens=2048)

    before = accuracy(engine, test_env, args.eval_tasks, limits, args.seed)
    print(f"held-out accuracy before: {before:.3f}")
    for step in range(args.steps):
        first = step * args.tasks_per_step
        groups = rollout(
            engine,
            train_env,
            range(first, first + args.tasks_per_step),
            group_size=args.group_size,
            config=limits,
            seed=args.seed + step,
        )
        metrics = grpo_step(model, tokenizer, optimizer, groups, temperature=limits.temperature)
        engine.sync_weights(model)  # the engine now samples from weight version step + 1
        print(f"step {step + 1}/{args.steps}  " + "  ".join(f"{key} {value:.4f}" for key, value in metrics.items()))
    after = accuracy(engine, test_env, args.eval_tasks, limits, args.seed)
    print(f"held-out accuracy after: {after:.3f} (before {before:.3f})")


if __name__ == "__main__":
    main()

"""Train any agent program that talks to the policy through the OpenAI API.

    from agentic_rl import agents

    def agent(task, client):            # plain code using the official openai client
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["question"]}])
        return reply.choices[0].message.content

    result = agents.train(agent, tasks, reward=lambda task, answer: float(answer == task["answer"]),
                          config={"model": {"name": "smollm2-135m"}, "steps": 10, "tasks_per_step": 4, "group_size": 4})

Each step runs ``group_size`` concurrent episodes per task through an in-process gateway
(gateway/): every call is recorded token-exact, an episode's calls become trajectories
(chained calls: one multi-turn trajectory; calls that rewrite their history: several
samples sharing the episode's advantage), and the RL trainer updates the policy, which
the gateway serves from the next step on. The algorithm and its settings are the
``TrainConfig``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl.config import TrainConfig, build
from agentic_rl.gateway.agent_training import Agent, AgentSampler, Reward

__all__ = ["AgentTrainResult", "train"]


@dataclass
class AgentTrainResult:
    model: Any
    tokenizer: Any
    steps: list[dict[str, float]] = field(default_factory=list)
    """Each step's metrics."""
    output_dir: Path | None = None


def train(
    agent: Agent, tasks: Sequence[dict], reward: Reward | None = None, config: TrainConfig | dict | None = None, *,
    on_agent_error: str = "infra", concurrency: int = 16, on_step: Callable[[dict[str, float]], None] | None = None, loaded=None,
) -> AgentTrainResult:
    """RL on ``agent(task, client)`` over ``tasks`` scored by ``reward(task, result)`` (see
    the module docstring). ``config``: a TrainConfig or its dict (model, algorithm, optim,
    steps, tasks_per_step, group_size, rollout.max_new_tokens as the default max_tokens,
    rollout.max_total_tokens as the context limit, seed, output_dir: metrics.jsonl and the
    final model are written there). ``loaded``: an already loaded ``(model, tokenizer)``."""
    import torch

    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.gateway.server import GatewayServer
    from agentic_rl.models import load
    from agentic_rl.models.precision import apply_precision
    from agentic_rl.training.rl import RLTrainer

    config = config if isinstance(config, TrainConfig) else build(TrainConfig, dict(config or {}))
    tasks = list(tasks)
    if not tasks:
        raise ValueError("tasks: expected at least one task")
    torch.manual_seed(config.seed)
    model, tokenizer = loaded or load(config.model.name, device=config.model.device)
    model = model.float()
    apply_precision(model, config.precision)
    backend = HFBackend(model, tokenizer, batch_size=config.backend.batch_size)  # shares the trainer's weights: no sync copy
    server = GatewayServer(backend, model_name=config.model.name, port=0, max_context=config.rollout.max_total_tokens, default_max_tokens=config.rollout.max_new_tokens)
    server.start()
    sampler = AgentSampler(server, agent, tasks, reward, concurrency=concurrency, on_agent_error=on_agent_error, timeout_s=config.rollout.timeout_s)
    result = AgentTrainResult(model, tokenizer, output_dir=Path(config.output_dir) if config.output_dir else None)
    try:
        trainer = RLTrainer(config, model, tokenizer, backend, None, list(range(len(tasks))), sampler=sampler)
        while trainer.steps_done < config.steps:
            metrics, _ = trainer.step()
            result.steps.append(metrics)
            if on_step is not None:
                on_step(metrics)
    finally:
        sampler.close()
        server.shutdown()
        server.server_close()
    if result.output_dir is not None:
        from agentic_rl.training.checkpoint import save_final

        result.output_dir.mkdir(parents=True, exist_ok=True)
        (result.output_dir / "metrics.jsonl").write_text("".join(json.dumps(step) + "\n" for step in result.steps))
        save_final(model, tokenizer, result.output_dir / "final")
    return result

"""Train any agent program that talks to the policy through the OpenAI API.

    from agentic_rl import agents

    def agent(task, client):            # plain code using the official openai client
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["question"]}])
        return reply.choices[0].message.content

    result = agents.train(agent, tasks, reward=lambda answer, task: float(answer == task["answer"]),
                          config={"model": {"name": "smollm2-135m"}, "rl": {"steps": 10, "tasks_per_step": 4, "group_size": 4}})

Each step runs ``rl.group_size`` concurrent episodes per task through an in-process gateway
(gateway/): every call is recorded token-exact, an episode's calls become trajectories
(chained calls: one multi-turn trajectory; calls that rewrite their history: several
samples sharing the episode's advantage), and the RL trainer updates the policy, which
the gateway serves from the next step on. The algorithm and its settings are the
``TrainConfig``'s.

A multi-agent program names each call's role in ``model`` (``model="planner"``,
``model="solver"``): the shared policy plays every role (the program's prompts condition
it), each role's calls become that role's samples, and each role gets its own groups
(advantages compare a role's episodes of a task with each other) and its own reward
when ``reward`` returns ``{role: number}`` (one number: every role's). The step metrics
and ``evaluate``'s result split by role (``reward_mean@planner``, ``avg@1@solver``, ...).
See docs/tutorials/multi-agent.md.

``evaluate`` runs the agent on held-out tasks the same way (no update); ``train`` does it
before and after training when given ``eval_tasks``. With an ``output_dir`` a run is a
run directory like ``agentic-rl train``'s (config.yaml, metrics.jsonl, eval_before.json /
eval_after.json, checkpoints/ every ``checkpoint_every`` steps, final/) and ``resume=``
continues it from its newest complete checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl.config import TrainConfig, build
from agentic_rl.gateway.agent_training import Agent, AgentSampler, Reward, evaluation_metrics

__all__ = ["AgentTrainResult", "evaluate", "train"]

EVAL_SEED_OFFSET = 7919
"""Held-out episodes draw from ``seed + EVAL_SEED_OFFSET``: the same streams before and
after training (a paired comparison), never the training steps' streams."""


@dataclass
class AgentTrainResult:
    model: Any
    tokenizer: Any
    steps: list[dict[str, float]] = field(default_factory=list)
    """Each step's metrics (a resumed run: the steps before the checkpoint too)."""
    output_dir: Path | None = None
    evals: dict[str, dict[str, float]] = field(default_factory=dict)
    """``before`` / ``after``: :func:`evaluate`'s metrics on ``eval_tasks``."""


def agent_name(agent: Agent) -> str:
    """``module:qualname``, the name a run directory records its agent under."""
    return f"{getattr(agent, '__module__', '?')}:{getattr(agent, '__qualname__', type(agent).__name__)}"


def _config(config: TrainConfig | dict | None) -> TrainConfig:
    return config if isinstance(config, TrainConfig) else build(TrainConfig, dict(config or {}))


def _load(config: TrainConfig, loaded):
    import torch

    from agentic_rl.models import load
    from agentic_rl.models.lora import add_role_adapters, apply_lora
    from agentic_rl.models.precision import apply_precision

    torch.manual_seed(config.seed)
    model, tokenizer = loaded or load(config.model.name, device=config.model.device)
    model = model.float()
    apply_precision(model, config.precision)
    return add_role_adapters(apply_lora(model, config.lora), config.lora), tokenizer


@contextmanager
def _gateway(model, tokenizer, config: TrainConfig) -> Iterator[tuple[Any, Any]]:
    """An in-process gateway over ``model`` -> (server, backend)."""
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.gateway.server import GatewayServer
    from agentic_rl.models.lora import adapter_for_role

    backend = HFBackend(
        model, tokenizer, batch_size=config.backend.batch_size
    )  # shares the trainer's weights: no sync copy
    roles = config.lora.roles
    server = GatewayServer(
        backend,
        model_name=config.model.name,
        adapter_for=(lambda role: adapter_for_role(roles, role)) if roles else None,
        port=0,
        max_context=config.rollout.max_total_tokens,
        default_max_tokens=config.rollout.max_new_tokens,
        keep_idle_s=0.0,  # the trainer updates these weights between rollouts: no session may outlive one
    )
    server.start()
    try:
        yield server, backend
    finally:
        server.shutdown()
        server.server_close()


def _check_tasks(tasks: Sequence[dict], what: str) -> list[dict]:
    tasks = list(tasks)
    if not tasks:
        raise ValueError(f"{what}: expected at least one task")
    return tasks


def _held_out(
    server,
    agent: Agent,
    tasks: list[dict],
    reward: Reward | None,
    config: TrainConfig,
    *,
    k: int,
    on_agent_error: str,
    concurrency: int,
) -> dict[str, float]:
    from agentic_rl.models.lora import frozen

    sampler = AgentSampler(
        server,
        agent,
        tasks,
        reward,
        concurrency=concurrency,
        on_agent_error=on_agent_error,
        timeout_s=config.rollout.timeout_s,
        frozen_roles=frozen(config.lora),
    )
    try:
        groups, agent_metrics = sampler.sample(list(range(len(tasks))), k, config.seed + EVAL_SEED_OFFSET)
    finally:
        sampler.close()
    return evaluation_metrics(groups, agent_metrics, k)


def evaluate(
    agent: Agent,
    tasks: Sequence[dict],
    reward: Reward | None = None,
    config: TrainConfig | dict | None = None,
    *,
    k: int = 1,
    on_agent_error: str = "infra",
    concurrency: int = 16,
    loaded=None,
) -> dict[str, float]:
    """Run ``agent`` ``k`` times on every task against the policy (``config.model``, or
    ``loaded = (model, tokenizer)``) and score each episode with ``reward``; the agent's
    own sampling settings apply. Returns ``avg@k`` (mean reward > 0 over all episodes, each
    task weighing the same), ``pass@k``, ``mean_reward``, ``calls_per_episode``,
    ``agent_errors`` and the other fields of :func:`evaluation_metrics` (per role too, for
    a program with several roles)."""
    if k < 1:
        raise ValueError(f"k: expected at least 1, got {k}")
    from agentic_rl.optional import check

    check("openai", "pip install openai", "an agent program's client")
    config = _config(config)
    tasks = _check_tasks(tasks, "tasks")
    model, tokenizer = _load(config, loaded)
    with _gateway(model, tokenizer, config) as (server, _):
        return _held_out(
            server, agent, tasks, reward, config, k=k, on_agent_error=on_agent_error, concurrency=concurrency
        )


def train(
    agent: Agent,
    tasks: Sequence[dict],
    reward: Reward | None = None,
    config: TrainConfig | dict | None = None,
    *,
    eval_tasks: Sequence[dict] | None = None,
    eval_k: int = 1,
    resume: str | Path | None = None,
    on_agent_error: str = "infra",
    concurrency: int = 16,
    on_step: Callable[[dict[str, float]], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    loaded=None,
) -> AgentTrainResult:
    """RL on ``agent(task, client)`` over ``tasks`` scored by ``reward(result, task)`` (see
    the module docstring). ``config``: a TrainConfig or its dict (model, algorithm, optim,
    rl.steps, rl.tasks_per_step, rl.group_size, rollout.max_new_tokens as the default max_tokens,
    rollout.max_total_tokens as the context limit, seed, output_dir, checkpoint_every,
    keep_checkpoints). ``eval_tasks``: held-out tasks run ``eval_k`` times each before and
    after training (``result.evals``). ``resume``: a run directory this function wrote; the
    run continues from its newest complete checkpoint with its saved config, ``config``
    (a dict) then holds only the changes allowed mid-run (steps, optim.lr, ...).
    ``loaded``: an already loaded ``(model, tokenizer)``."""
    from agentic_rl.models.lora import adapter_for_role, frozen
    from agentic_rl.training.rl import RLTrainer

    say = on_stage or (lambda _message: None)
    tasks = _check_tasks(tasks, "tasks")
    eval_tasks = _check_tasks(eval_tasks, "eval_tasks") if eval_tasks is not None else None
    if eval_k < 1:
        raise ValueError(f"eval_k: expected at least 1, got {eval_k}")
    run, config, checkpoint = _open_run(agent, config, resume, say)
    model, tokenizer = _load(config, loaded)
    result = AgentTrainResult(model, tokenizer, output_dir=run.path if run is not None else None)
    with _gateway(model, tokenizer, config) as (server, backend):
        sampler = AgentSampler(
            server,
            agent,
            tasks,
            reward,
            concurrency=concurrency,
            on_agent_error=on_agent_error,
            timeout_s=config.rollout.timeout_s,
            frozen_roles=frozen(config.lora),
        )
        try:
            trainer = RLTrainer(config, model, tokenizer, backend, None, list(range(len(tasks))), sampler=sampler)
            if config.lora.roles:  # each role's samples train (and are scored by) its own adapter
                trainer.adapter_of = lambda t: adapter_for_role(config.lora.roles, t.info.get("role"))
            if checkpoint is not None:
                _restore(run, trainer, checkpoint)
                say(f"resumed from {checkpoint.name} (step {trainer.steps_done} of {config.rl.steps})")
            result.steps = run.read_lines("metrics.jsonl") if run is not None else []

            def held_out(label: str) -> None:
                if eval_tasks is None:
                    return
                if run is not None and run.file(f"eval_{label}.json").is_file():  # a resumed run evaluated it already
                    result.evals[label] = run.read_json(f"eval_{label}.json")
                    return
                say(f"evaluating the agent ({label}) on {len(eval_tasks)} held-out tasks x {eval_k}")
                result.evals[label] = _held_out(
                    server,
                    agent,
                    eval_tasks,
                    reward,
                    config,
                    k=eval_k,
                    on_agent_error=on_agent_error,
                    concurrency=concurrency,
                )
                if run is not None:
                    run.write_json(f"eval_{label}.json", result.evals[label])

            held_out("before")
            _steps(trainer, run, config, result, on_step, say)
            held_out("after")
        finally:
            sampler.close()
    if run is not None:
        from agentic_rl.models.lora import save_role_adapters
        from agentic_rl.training.final_model import save_final

        save_role_adapters(model, config.lora, run.file("final") / "adapters", base=config.model.name)
        save_final(model, tokenizer, run.file("final"))
    return result


def _open_run(agent: Agent, config: TrainConfig | dict | None, resume: str | Path | None, say: Callable[[str], None]):
    """(run directory or None, the config, the checkpoint to continue from or None)."""
    from agentic_rl.config import ConfigError
    from agentic_rl.config.resume import resume_config
    from agentic_rl.gateway.agent_settings import refuse_ignored
    from agentic_rl.optional import check
    from agentic_rl.training.checkpoint import usable_checkpoint
    from agentic_rl.training.run_dir import RunDirectory

    check("openai", "pip install openai", "an agent program's client (train-agent)")
    name = agent_name(agent)
    if resume is None:
        config = _config(config)
        refuse_ignored(config)
        if not config.output_dir:
            return None, config, None
        return RunDirectory.create(config.output_dir, name=name, config=config.model_dump()), config, None
    if isinstance(config, TrainConfig):
        raise ConfigError(
            "resume: pass only the changes as a dict (the run's saved config is the base), not a TrainConfig"
        )
    run, saved_name, saved = RunDirectory.existing(resume)
    if saved_name != name:
        raise ConfigError(f"resume: {run.path} trained the agent {saved_name}, not {name}")
    config, changed = resume_config(saved, dict(config or {}))
    refuse_ignored(config)
    for line in changed:
        say(f"resume: {line}")
    if changed:
        run.write_config(name, config.model_dump())
    checkpoint = usable_checkpoint(run.checkpoints)
    if checkpoint is None:
        raise ConfigError(f"resume: {run.path} has no complete checkpoint (set checkpoint_every to write them)")
    return run, config, checkpoint


def _restore(run, trainer, checkpoint: Path) -> None:
    from agentic_rl.config import ConfigError
    from agentic_rl.training.checkpoint import CheckpointError, load_checkpoint

    try:
        trainer_state, info = load_checkpoint(checkpoint, model=trainer.model)
    except CheckpointError as error:
        raise ConfigError(f"resume: {error}") from None
    trainer.load_state_dict(trainer_state)
    run.truncate_lines("metrics.jsonl", info["metrics_lines"])


def _steps(
    trainer,
    run,
    config: TrainConfig,
    result: AgentTrainResult,
    on_step: Callable[[dict[str, float]], None] | None,
    say: Callable[[str], None],
) -> None:
    """The RL steps left, each logged (metrics.jsonl and the configured trackers) and
    checkpointed every ``checkpoint_every`` steps."""
    from contextlib import nullcontext

    from agentic_rl.tracking.sinks import MultiSink, make_sinks
    from agentic_rl.training.checkpoint import save_checkpoint
    from agentic_rl.training.rl_metrics import ENV_TOOL_METRICS

    resumed = trainer.steps_done > 0
    sinks = (
        MultiSink(
            make_sinks(run.path, ["jsonl", *config.tracking.sinks], start_step=trainer.steps_done if resumed else None),
            on_error=say,
        )
        if run is not None
        else nullcontext()
    )
    with sinks:
        while trainer.steps_done < config.rl.steps:
            metrics, _ = trainer.step()
            metrics = {key: value for key, value in metrics.items() if key not in ENV_TOOL_METRICS}
            result.steps.append(metrics)
            if run is not None:
                sinks.log(metrics, int(metrics["step"]))
            if on_step is not None:
                on_step(metrics)
            if (
                run is not None
                and config.checkpoint_every
                and trainer.steps_done % config.checkpoint_every == 0
                and trainer.steps_done < config.rl.steps
            ):
                save_checkpoint(
                    run.checkpoints,
                    trainer.steps_done,
                    model=trainer.model,
                    trainer_state=trainer.state_dict(),
                    info={"step": trainer.steps_done, "metrics_lines": len(result.steps)},
                    keep=config.keep_checkpoints,
                )

"""``agentic-rl train-agent``: RL on an agent program that calls the policy through the gateway."""

from __future__ import annotations

import argparse


def _train_agent(args: argparse.Namespace) -> int:
    from agentic_rl import agents
    from agentic_rl.config import ConfigError, TrainConfig, apply_assignments, build
    from agentic_rl.data.conversations import read_jsonl
    from agentic_rl.imports import ImportPathError, import_object
    from agentic_rl.rewards.signature import check_reward_order
    from agentic_rl.tracking.display import StepClock, console, print_step

    try:
        agent = import_object(args.agent, "agent")
        reward = import_object(args.reward, "--reward") if args.reward else None
        if reward is not None:
            check_reward_order(reward, "--reward")
    except (ImportPathError, TypeError) as exc:
        raise ConfigError(str(exc)) from None

    def tasks_from(path: str, flag: str) -> list[dict]:
        try:
            return read_jsonl(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{flag}: {exc}") from None

    tasks = tasks_from(args.tasks, "--tasks")
    eval_tasks = tasks_from(args.eval_tasks, "--eval-tasks") if args.eval_tasks else None
    if args.resume and args.output_dir:
        raise ConfigError(
            "--output-dir: a resumed run continues in its own directory (--resume RUN_DIR); leave --output-dir out"
        )
    overrides = apply_assignments({}, args.set or [])
    config = (
        overrides
        if args.resume
        else build(TrainConfig, {**overrides, **({"output_dir": args.output_dir} if args.output_dir else {})})
    )
    if args.resume:
        from agentic_rl.training.run_dir import RunDirectory

        saved = RunDirectory.existing(args.resume)[2].get("rl") or {}
        steps = int((overrides.get("rl") or {}).get("steps", saved.get("steps", 0)))
    else:
        from agentic_rl.gateway.agent_settings import refuse_ignored
        from agentic_rl.optional import check

        check("openai", "pip install openai", "an agent program's client (train-agent)")
        refuse_ignored(config)  # before the first line of output: a refused setting is the only line
        steps = config.rl.steps
        console.print(
            f"training {args.agent} on {len(tasks)} tasks through the gateway: {config.rl.steps} steps x {config.rl.tasks_per_step} tasks x {config.rl.group_size} episodes"
        )
    clock = StepClock(steps)
    try:
        result = agents.train(
            agent,
            tasks,
            reward,
            config,
            eval_tasks=eval_tasks,
            eval_k=args.eval_k,
            resume=args.resume,
            on_agent_error=args.on_agent_error,
            on_step=lambda metrics: print_step(metrics, steps, clock),
            on_stage=lambda line: console.print(line),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for label, metrics in result.evals.items():
        console.print(
            f"held-out ({label}): avg@{args.eval_k} {metrics[f'avg@{args.eval_k}']:.3f}  pass@{args.eval_k} {metrics[f'pass@{args.eval_k}']:.3f}  calls/episode {metrics['calls_per_episode']:.2f}  agent errors {metrics['agent_errors']:.2f}"
        )
    if result.output_dir is not None:
        console.print(f"run directory: {result.output_dir}  (final model: {result.output_dir / 'final'})")
    return 0


def register(commands) -> None:
    train_agent = commands.add_parser(
        "train-agent", help="RL on an agent program that calls the policy through the OpenAI API (via the gateway)"
    )
    train_agent.add_argument(
        "agent",
        help="import path of agent(task, client), e.g. my_agents:calculator (the working directory is importable)",
    )
    train_agent.add_argument(
        "--tasks", required=True, help="JSONL file, one task object per line (passed to the agent and the reward)"
    )
    train_agent.add_argument(
        "--reward", help="import path of reward(result, task) -> float (or the agent posts /episodes/{id}/reward)"
    )
    train_agent.add_argument(
        "--on-agent-error",
        choices=("infra", "zero"),
        default="infra",
        help="an exception in the agent: an infrastructure error (masked) or reward 0",
    )
    train_agent.add_argument(
        "--output-dir", help="a run directory: config.yaml, metrics.jsonl, eval_*.json, checkpoints/, final/"
    )
    train_agent.add_argument(
        "--eval-tasks", help="JSONL file of held-out tasks: the agent is evaluated on them before and after training"
    )
    train_agent.add_argument("--eval-k", type=int, default=1, help="episodes per held-out task (avg@k, pass@k)")
    train_agent.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its newest complete checkpoint (--set may change steps, optim.lr, ...)",
    )
    train_agent.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any training config key, e.g. rl.steps=20 or model.name=tiny-random",
    )
    train_agent.set_defaults(run=_train_agent)

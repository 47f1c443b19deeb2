"""Training agent programs through the gateway: each step runs G episodes per task of a
plain Python function that talks to the policy with the official ``openai`` client, and
turns what the gateway served into trajectories (gateway/traces.py).

``agent(task, client)`` gets a task (a dict) and an ``openai.OpenAI`` client whose
``base_url`` is its episode's (so every call it makes is recorded); it returns whatever it
likes. ``reward(result, task) -> float`` scores the episode (the order every reward
function here takes: ``agentic_rl.rewards.signature``) (or the agent posts it to
``/episodes/{id}/reward`` with its client's ``api_key`` as the bearer token, the gateway's
write token; a posted reward wins). An exception in the agent's code is an
infrastructure error by default (masked from the loss, counted); ``on_agent_error:
"zero"`` scores the episode 0 instead, keeping what it sampled.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentic_rl.evaluation.metrics import aggregate_metrics
from agentic_rl.gateway.server import GatewayServer
from agentic_rl.gateway.traces import calls_to_trajectories
from agentic_rl.rewards.signature import check_reward_order
from agentic_rl.seeds import stream_seed
from agentic_rl.types import Trajectory, TrajectoryGroup

EVALUATION_FIELDS = (
    "mean_reward",
    "mean_turns",
    "mean_response_tokens",
    "mean_segments",
    "num_tasks",
    "num_samples",
    "infra_error_rate",
)
"""The fields of ``aggregate_metrics`` that mean something for agent episodes (besides
avg@k and pass@k): calls are not env tool calls, and the agent's result is not an answer
to vote on."""

Agent = Callable[[dict, Any], Any]
Reward = Callable[[Any, dict], float]
ON_AGENT_ERROR = ("infra", "zero")


class AgentSampler:
    """The RL trainer's sampler (``RLTrainer(sampler=...)``) for an agent program: G
    concurrent episodes per task through ``server``; ``concurrency`` episodes run at once."""

    def __init__(
        self,
        server: GatewayServer,
        agent: Agent,
        tasks: Sequence[dict],
        reward: Reward | None,
        *,
        concurrency: int = 16,
        on_agent_error: str = "infra",
        timeout_s: float = 600.0,
    ) -> None:
        if reward is not None:
            check_reward_order(reward)
        if on_agent_error not in ON_AGENT_ERROR:
            raise ValueError(f"on_agent_error: expected one of {', '.join(ON_AGENT_ERROR)}, got {on_agent_error!r}")
        self.server, self.agent, self.tasks, self.reward = server, agent, tasks, reward
        self.on_agent_error, self.timeout_s = on_agent_error, timeout_s
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agent")

    def __call__(self, trainer, task_indices: list[int], seed: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        return self.sample(task_indices, trainer.config.rl.group_size, seed)

    def sample(
        self, task_indices: list[int], group_size: int, seed: int
    ) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        """``group_size`` episodes of each task (episode j of the task at position p draws
        from stream ``p * group_size + j`` of ``seed``) -> (one group per task, the agent
        metrics: ``agent_errors``, ``calls_per_episode``, ``samples_per_episode``)."""
        groups = [
            TrajectoryGroup(task_id=str(index), group_id=uuid.uuid4().hex[:12], task_index=index)
            for index in task_indices
        ]
        jobs = [
            (
                group,
                index,
                self.pool.submit(self._episode, index, group.group_id, stream_seed(seed, position * group_size + j)),
            )
            for position, (group, index) in enumerate(zip(groups, task_indices))
            for j in range(group_size)
        ]
        episodes = errors = calls = 0
        for group, _, future in jobs:
            episode, failed, made = future.result()
            group.trajectories.append(episode)
            episodes, errors, calls = episodes + 1, errors + failed, calls + made
        samples = sum(len(t.samples) for g in groups for t in g.trajectories)
        return groups, {
            "agent_errors": errors / max(episodes, 1),
            "calls_per_episode": calls / max(episodes, 1),
            "samples_per_episode": samples / max(episodes, 1),
        }

    def _episode(self, index: int, group_id: str, seed: int) -> tuple[Trajectory, int, int]:
        """One episode -> (its trajectory, earlier samples in ``segments``; whether the agent
        failed; the calls it made)."""
        import openai

        task = self.tasks[index]
        episode_id = f"{group_id}-{uuid.uuid4().hex[:8]}"
        self.server.store.open(episode_id, seed=seed)
        client = openai.OpenAI(
            base_url=self.server.episode_url(episode_id),
            api_key=self.server.write_token,  # what the agent needs to post its reward itself
            max_retries=0,
            timeout=self.timeout_s,
        )
        error = None
        try:
            result = self.agent(task, client)
        except Exception as exc:  # the agent's own code failed: not the policy's doing by default
            error, result = f"agent raised {type(exc).__name__}: {exc}"[:500], None
        finally:
            client.close()
        trace = self.server.store.pop(episode_id)
        calls = trace.calls if trace else []
        task_id = str(task.get("id", index)) if isinstance(task, dict) else str(index)
        if error is not None and self.on_agent_error == "infra":
            return (
                Trajectory(task_id=task_id, group_id=group_id, infra_error=error, termination_reason="error"),
                1,
                len(calls),
            )
        try:
            reward = 0.0 if error is not None else self._reward(task, result, trace)
        except Exception as exc:  # a reward function that fails is infrastructure too
            return (
                Trajectory(
                    task_id=task_id,
                    group_id=group_id,
                    infra_error=f"reward raised {type(exc).__name__}: {exc}"[:500],
                    termination_reason="error",
                ),
                1,
                len(calls),
            )
        samples = calls_to_trajectories(calls, reward=reward, task_id=task_id, group_id=group_id)
        if not samples:  # the agent never called the model: nothing to learn from
            return (
                Trajectory(
                    task_id=task_id,
                    group_id=group_id,
                    infra_error="the agent made no model call",
                    termination_reason="error",
                ),
                int(error is not None),
                0,
            )
        for sample in samples:
            sample.correct = reward > 0
            if error is not None:
                sample.info["agent_error"] = error
        episode = samples[-1]
        episode.segments = samples[:-1]  # calls that rewrote the history: samples sharing the episode's advantage
        return episode, int(error is not None), len(calls)

    def _reward(self, task: dict, result: Any, trace) -> float:
        if trace is not None and trace.reward is not None:
            return float(trace.reward)
        if self.reward is None:
            raise ValueError("no reward: pass reward(result, task) or POST it to /episodes/{id}/reward")
        return float(self.reward(result, task))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def evaluation_metrics(groups: list[TrajectoryGroup], agent_metrics: dict[str, float], k: int) -> dict[str, float]:
    """Held-out metrics of agent episodes, ``k`` per task: ``avg@k`` (the share of episodes
    with reward > 0, each task weighing the same), ``pass@k``, :data:`EVALUATION_FIELDS`
    (``mean_turns``: model calls per trajectory) and the sampler's agent metrics."""
    metrics = aggregate_metrics([g.trajectories for g in groups], k)
    return {
        f"avg@{k}": metrics[f"avg@{k}"],
        f"pass@{k}": metrics[f"pass@{k}"],
        **{name: metrics[name] for name in EVALUATION_FIELDS},
        **agent_metrics,
    }

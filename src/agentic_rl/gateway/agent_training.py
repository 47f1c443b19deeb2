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

Roles (a multi-agent program): each call's ``model`` names the role that made it. An
episode's calls split by role and each role's calls become that role's samples
(gateway/traces.py); a task's episodes make one group per role (``<id>@<role>``,
``rollout/roles.py``), so group advantages compare a role's episode only
with the same role's episodes of the same task. The reward (returned or posted) is one
number, every role's (cooperative), or ``{role: number}``, each role its own (e.g.
zero-sum); a role the dict leaves out is an error naming it. A program whose calls all
name one model (any name) has one role and one group per task.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentic_rl.evaluation.metrics import aggregate_metrics, pass_at_k
from agentic_rl.gateway.server import GatewayServer
from agentic_rl.gateway.traces import calls_by_role, calls_to_trajectories
from agentic_rl.rewards.signature import check_reward_order
from agentic_rl.rollout.roles import ROLE_SEPARATOR, role_groups, role_metrics, role_of, task_key
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
Reward = Callable[[Any, dict], float | dict[str, float]]
ON_AGENT_ERROR = ("infra", "zero")


class RoleRewardError(ValueError):
    """A ``{role: number}`` reward that leaves out a role of the episode (or gives one no
    number): the program's mistake, raised rather than scored as 0 or masked."""


def role_rewards(reward: float | dict[str, Any], roles: Sequence[str], *, source: str) -> dict[str, float]:
    """Each of ``roles``' reward: one number is every role's; a dict gives each role its own
    (keys for roles that did not act are ignored). ``source`` names the reward in errors."""
    if not isinstance(reward, dict):
        return {role: float(reward) for role in roles}
    out = {}
    for role in roles:
        if role not in reward:
            raise RoleRewardError(
                f"{source}: no reward for role {role!r} (the episode's roles: {', '.join(map(repr, roles))}; "
                f"the reward names: {', '.join(map(repr, reward)) or 'none'})"
            )
        value = reward[role]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)  # numpy and torch scalars
            except (TypeError, ValueError):
                raise RoleRewardError(f"{source}: role {role!r}: expected a number, got {str(value)[:40]}") from None
        out[role] = float(value)
    return out


@dataclass
class _Episode:
    by_role: dict[str | None, Trajectory]
    """Each role's trajectory (earlier samples in ``segments``); key None: the episode failed
    (an infrastructure error), and its one trajectory stands for every role."""
    failed: int
    """Whether the agent's code raised."""
    calls: dict[str, int]
    """Model calls by role."""


def _failed(task_id: str, group_id: str, error: str) -> Trajectory:
    return Trajectory(task_id=task_id, group_id=group_id, infra_error=error[:500], termination_reason="error")


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
        frozen_roles: Sequence[str] = (),
    ) -> None:
        if reward is not None:
            check_reward_order(reward)
        if on_agent_error not in ON_AGENT_ERROR:
            raise ValueError(f"on_agent_error: expected one of {', '.join(ON_AGENT_ERROR)}, got {on_agent_error!r}")
        self.server, self.agent, self.tasks, self.reward = server, agent, tasks, reward
        self.on_agent_error, self.timeout_s = on_agent_error, timeout_s
        self.frozen_roles = frozenset(frozen_roles)
        """Roles served but not trained (``lora.roles`` frozen): their calls make no samples and need no reward."""
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="agent")

    def __call__(self, trainer, task_indices: list[int], seed: int) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        return self.sample(task_indices, trainer.config.rl.group_size, seed)

    def sample(
        self, task_indices: list[int], group_size: int, seed: int
    ) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        """``group_size`` episodes of each task (episode j of the task at position p draws
        from stream ``p * group_size + j`` of ``seed``) -> (one group per task and role, the
        agent metrics: ``agent_errors``, ``calls_per_episode``, ``samples_per_episode``, and
        with several roles :func:`role_metrics`)."""
        ids = [uuid.uuid4().hex[:12] for _ in task_indices]
        jobs = [
            [
                self.pool.submit(self._episode, index, group_id, stream_seed(seed, position * group_size + j))
                for j in range(group_size)
            ]
            for position, (index, group_id) in enumerate(zip(task_indices, ids))
        ]
        groups: list[TrajectoryGroup] = []
        episodes: list[_Episode] = []
        for index, group_id, futures in zip(task_indices, ids, jobs):
            results = [future.result() for future in futures]
            episodes += results
            groups += role_groups(index, str(index), group_id, [e.by_role for e in results])
        count = max(len(episodes), 1)
        return groups, {
            "agent_errors": sum(e.failed for e in episodes) / count,
            "calls_per_episode": sum(sum(e.calls.values()) for e in episodes) / count,
            "samples_per_episode": sum(len(t.samples) for g in groups for t in g.trajectories) / count,
            **role_metrics(groups, [e.calls for e in episodes]),
        }

    def _episode(self, index: int, group_id: str, seed: int) -> _Episode:
        """One episode: its calls split by role, each role's samples scored with its reward."""
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
        by_role = calls_by_role(trace.calls if trace else [])
        calls = {role: len(made) for role, made in by_role.items()}
        by_role = {role: made for role, made in by_role.items() if role not in self.frozen_roles}
        task_id = str(task.get("id", index)) if isinstance(task, dict) else str(index)
        if error is not None and self.on_agent_error == "infra":
            return _Episode({None: _failed(task_id, group_id, error)}, 1, calls)
        try:
            reward = 0.0 if error is not None else self._reward(task, result, trace)
        except Exception as exc:  # a reward function that fails is infrastructure too
            return _Episode({None: _failed(task_id, group_id, f"reward raised {type(exc).__name__}: {exc}")}, 1, calls)
        if not by_role:  # the agent never called the model (or only frozen roles): nothing to learn from
            why = "the agent made no model call" + (" of a trained role" if calls else "")
            return _Episode({None: _failed(task_id, group_id, why)}, int(error is not None), calls)
        posted = trace is not None and trace.reward is not None
        rewards = role_rewards(reward, list(by_role), source="the posted reward" if posted else "reward(result, task)")
        episode: dict[str | None, Trajectory] = {}
        for role, role_calls in by_role.items():
            samples = calls_to_trajectories(role_calls, reward=rewards[role], task_id=task_id, group_id=group_id)
            for sample in samples:
                sample.correct = rewards[role] > 0
                sample.info["role"] = role
                if error is not None:
                    sample.info["agent_error"] = error
            episode[role] = samples[-1]
            episode[role].segments = samples[:-1]  # calls that rewrote the history: samples sharing its advantage
        return _Episode(episode, int(error is not None), calls)

    def _reward(self, task: dict, result: Any, trace) -> float | dict[str, Any]:
        if trace is not None and trace.reward is not None:
            return trace.reward
        if self.reward is None:
            raise ValueError("no reward: pass reward(result, task) or POST it to /episodes/{id}/reward")
        value = self.reward(result, task)
        return value if isinstance(value, dict) else float(value)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def evaluation_metrics(groups: list[TrajectoryGroup], agent_metrics: dict[str, float], k: int) -> dict[str, float]:
    """Held-out metrics of agent episodes, ``k`` per task: ``avg@k`` (the share of episodes
    with reward > 0, each task weighing the same), ``pass@k``, :data:`EVALUATION_FIELDS`
    (``mean_turns``: model calls per trajectory) and the sampler's agent metrics. With
    several roles each (task, role) group weighs the same, ``num_tasks`` counts tasks, and
    ``avg@k@role``, ``pass@k@role``, ``mean_reward@role``, ``num_samples@role`` follow (a
    role that acted in fewer than k episodes of a task: pass@ as many as it had)."""
    if not any(ROLE_SEPARATOR in group.group_id for group in groups):
        return {**_held_out(groups, k), **agent_metrics}
    metrics = {**_held_out(groups, k), "num_tasks": float(len({task_key(g) for g in groups}))}
    roles = list(dict.fromkeys(role for role in map(role_of, groups) if role is not None))
    for role in roles:
        own = _held_out([g for g in groups if role_of(g) == role], k)
        for name in (f"avg@{k}", f"pass@{k}", "mean_reward", "num_samples"):
            metrics[f"{name}@{role}"] = own[name]
    return {**metrics, **agent_metrics}


def _held_out(groups: list[TrajectoryGroup], k: int) -> dict[str, float]:
    metrics = aggregate_metrics([g.trajectories for g in groups], 1)  # avg@ reads every sample, whatever k
    passed = [
        pass_at_k(len(g.trajectories), sum(t.correct for t in g.trajectories), min(k, len(g.trajectories)))
        for g in groups
    ]
    return {
        f"avg@{k}": metrics["avg@1"],
        f"pass@{k}": sum(passed) / len(passed),
        **{name: metrics[name] for name in EVALUATION_FIELDS},
    }

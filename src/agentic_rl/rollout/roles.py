"""Roles (multi-agent episodes): a task's episodes become one group per role.

An episode with several roles (an env that declares ``roles``, or an agent program whose
calls name them in ``model``) holds one trajectory per role that acted. A task's episodes
make one group per role, named ``<task group id>@<role>``, so group advantages compare a
role's episode only with the same role's episodes of the same task; a step still counts
tasks (:func:`task_key`). An episode that failed (an infrastructure error) is every role's
failure; an episode in which a role did not act adds nothing to that role's group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from agentic_rl.types import Trajectory, TrajectoryGroup

ROLE_SEPARATOR = "@"
"""Between a task's group id and the role in a multi-role episode's group ids."""

ByRole = Mapping[str | None, Trajectory]
"""One episode: each role's trajectory (earlier samples in its ``segments``); key None: the
episode failed and its one trajectory stands for every role."""


def task_key(group: TrajectoryGroup) -> str:
    """What the groups sampled for one task share: their id before :data:`ROLE_SEPARATOR`."""
    return group.group_id.split(ROLE_SEPARATOR, 1)[0]


def role_of(group: TrajectoryGroup) -> str | None:
    """The role a group holds (None: an episode with one role)."""
    if ROLE_SEPARATOR in group.group_id:
        return group.group_id.split(ROLE_SEPARATOR, 1)[1]
    return next((t.info["role"] for t in group.trajectories if "role" in t.info), None)


def role_groups(
    index: int | None, task_id: str, group_id: str, episodes: Sequence[ByRole], roles: Sequence[str] = ()
) -> list[TrajectoryGroup]:
    """One task's episodes -> its groups: one (``group_id``) when they have one role, else one
    per role (``group_id@role``; ``roles`` first in their order, then the others in the order
    they first acted), each with that role's trajectory of every episode where it acted."""
    acted = [role for episode in episodes for role in episode if role is not None]
    names = list(dict.fromkeys([*(r for r in roles if r in acted), *acted]))
    if len(names) <= 1:
        trajectories = [next(iter(episode.values())) for episode in episodes]
        return [TrajectoryGroup(task_id=task_id, group_id=group_id, trajectories=trajectories, task_index=index)]
    groups = []
    for role in names:
        group = TrajectoryGroup(task_id=task_id, group_id=f"{group_id}{ROLE_SEPARATOR}{role}", task_index=index)
        for episode in episodes:
            trajectory = episode.get(role)
            if trajectory is None and None in episode:
                failed = episode[None]
                trajectory = replace(failed, info={**failed.info, "role": role})
            if trajectory is None:
                continue  # the role did not act in this episode
            for sample in trajectory.samples:
                sample.group_id = group.group_id
                sample.info["role"] = role  # what the trainer reads a sample's adapter from (lora.roles)
            group.trajectories.append(trajectory)
        groups.append(group)
    return groups


def per_task(groups: Sequence[TrajectoryGroup]) -> list[list[TrajectoryGroup]]:
    """Consecutive groups of the same task together (a task's role groups), in order: what
    data-parallel ranks gather by task position."""
    out: list[list[TrajectoryGroup]] = []
    for group in groups:
        if out and task_key(out[-1][0]) == task_key(group):
            out[-1].append(group)
        else:
            out.append([group])
    return out


def role_metrics(groups: Sequence[TrajectoryGroup], turns: Sequence[Mapping[str, int]]) -> dict[str, float]:
    """With several roles, per role: ``reward_mean@role`` (its usable trajectories' mean
    reward), ``samples_per_episode@role`` and ``calls_per_episode@role`` (over all episodes;
    ``turns``: each episode's model calls by role). Nothing with one role (its numbers are the step's)."""
    by_role: dict[str, list[Trajectory]] = {}
    for group in groups:
        role = role_of(group)
        if role is not None:
            by_role.setdefault(role, []).extend(group.trajectories)
    if len(by_role) < 2:
        return {}
    count, out = max(len(turns), 1), {}
    for role, trajectories in by_role.items():
        rewards = [t.reward for t in trajectories if t.infra_error is None]
        out[f"reward_mean@{role}"] = sum(rewards) / max(len(rewards), 1)
        out[f"samples_per_episode@{role}"] = sum(len(t.samples) for t in trajectories) / count
        out[f"calls_per_episode@{role}"] = sum(made.get(role, 0) for made in turns) / count
    return out


def episode_turns(groups: Sequence[TrajectoryGroup]) -> list[dict[str, int]]:
    """Each env episode's assistant turns by role (its role trajectories share an episode id)."""
    episodes: dict[str, dict[str, int]] = {}
    for group in groups:
        role = role_of(group)
        for trajectory in group.trajectories:
            key = str(trajectory.info.get("episode", id(trajectory)))
            made = episodes.setdefault(key, {})
            if role is not None and trajectory.infra_error is None:
                made[role] = made.get(role, 0) + trajectory.num_turns
    return list(episodes.values())


def gather_task_groups(dist, positions: list[int], groups: list[TrajectoryGroup], total: int) -> list[TrajectoryGroup]:
    """Every rank's groups in task order (``dist.gather_by_position`` over each task's
    groups, :func:`per_task`): the tasks at ``positions`` are this rank's, of ``total``."""
    return [group for task in dist.gather_by_position(positions, per_task(groups), total) for group in task]

"""``Cast``: the roles of a multi-role episode (an env that declares ``roles``).

Who plays next, each role's trajectory, its reward so far and whether its last turn ended
on a stop token, and the episode's outcome whichever role's step gave it. ``Episode``
(rollout/episode.py) holds one and asks it; the tokens stay the episode's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agentic_rl.envs.base import OPENING_INFO
from agentic_rl.errors import ConfigError
from agentic_rl.types import Message, Trajectory


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < float("inf")


@dataclass
class Cast:
    roles: tuple[str, ...]
    role: str
    """The role whose turn is next."""
    by_role: dict[str, Trajectory] = field(default_factory=dict)
    """Each role's trajectory, once the role is addressed."""
    reward: dict[str, float] = field(default_factory=dict)
    """Each role's reward so far (the step rewards credited to it)."""
    stopped: dict[str, bool] = field(default_factory=dict)
    """Whether each role's last turn ended on a stop token (how its next observation renders)."""
    answers: dict[str, str | None] = field(default_factory=dict)
    """Each role's answer: the ``answer`` of its own steps' info."""
    correct: bool = False
    """The episode's ``correct``, whichever role's step said it."""
    scored: bool = False
    """Whether any step gave ``role_rewards`` (then a role's ``correct`` is its reward > 0)."""

    @classmethod
    def for_env(cls, roles: tuple[str, ...], context: str) -> Cast | None:
        """The cast of an env declaring ``roles`` (None for none): its first role plays first
        unless the reset info names another. Each role's conversation grows in full: a
        ``rollout.context`` policy other than ``full`` is refused."""
        if not roles:
            return None
        if context != "full":
            raise ConfigError(
                f"rollout.context: {context!r} does not apply to an env with roles ({', '.join(roles)}): "
                "each role's conversation grows in full"
            )
        return cls(roles, roles[0])

    def unknown(self, role: object) -> str | None:
        """The infrastructure error of an env naming a role it did not declare, else None."""
        return (
            None if role in self.roles else f"env named role {role!r}, not one of its roles ({', '.join(self.roles)})"
        )

    def credit(self, step_reward: float, info: dict[str, Any]) -> float | str:
        """Credit one step: ``info["role_rewards"][role]`` to the roles it names, the step's
        reward to the others. Returns the acting role's reward, or the infrastructure error of
        a malformed ``role_rewards`` (the env's bug)."""
        given = info.get("role_rewards", {})
        bad = (
            "a dict"
            if not isinstance(given, dict)
            else next((f"{r!r}: not one of its roles" for r in given if r not in self.roles), None)
            or next((f"{r!r}: not a finite number" for r, v in given.items() if not _finite(v)), None)
        )
        if bad is not None:
            return f"env step info role_rewards: expected {{role: number}}, got {bad}"
        for role in self.roles:
            self.reward[role] = self.reward.get(role, 0.0) + float(given.get(role, step_reward))
        if "answer" in info:
            self.answers[self.role] = info["answer"]
        self.correct = bool(info.get("correct", self.correct))
        self.scored = self.scored or bool(given)
        return float(given.get(self.role, step_reward))

    def opened(self, first: Trajectory, observations: list[Message], info: dict[str, Any], renderer) -> Trajectory:
        """The next role's trajectory, opened by ``observations`` (with the step info's
        ``OPENING_INFO`` keys, as a reset's info would give them), its prompt rendered once
        (a token-level ``renderer``; None: chat level). A role that already had a
        conversation (a sub-agent called afresh: ``info["new_conversation"]``) keeps it as a
        segment of the new one: a sample of the same role sharing its advantage."""
        trajectory = Trajectory(
            task_id=first.task_id,
            group_id=first.group_id,
            messages=list(observations),
            info={
                "role": self.role,
                "episode": first.info["episode"],
                **{k: info[k] for k in OPENING_INFO if k in info},
            },
        )
        earlier = self.by_role.get(self.role)
        if earlier is not None:
            trajectory.segments = [*earlier.segments, replace(earlier, segments=[])]
        if renderer is not None:
            trajectory.append(renderer.prompt_ids(observations, tools=trajectory.template_tools), 0)
            trajectory.prompt_length = len(trajectory.token_ids)
        self.by_role[self.role] = trajectory
        return trajectory

    def close(self, error: str | None) -> None:
        """Give every role's trajectory its reward, its answer and the episode's outcome."""
        for role, trajectory in self.by_role.items():
            trajectory.reward = self.reward.get(role, 0.0)
            trajectory.answer, trajectory.infra_error = self.answers.get(role), error
            trajectory.correct = trajectory.reward > 0 if self.scored else self.correct

"""The text environment contract (Gymnasium-shaped) and ``check_env``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agentic_rl.errors import ConfigError
from agentic_rl.types import Message, Task

OPENING_INFO = ("tools", "tools_prompt", "tool_output_template")
"""The keys of a reset's info that describe a conversation's tools; an env with roles gives
them in the info of the step that opens another role's conversation."""


class GeneratedTasks(Sequence[Task]):
    """A lazy sequence of ``size`` procedurally generated tasks: task i is built on demand
    by ``generate(index)`` (seeded by the index), the same on every machine."""

    size: int

    def generate(self, index: int) -> Task:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if not -self.size <= index < self.size:
            raise IndexError(f"task index {index} out of range for {self.size} tasks")
        return self.generate(index % self.size)


@runtime_checkable
class Env(Protocol):
    """A multi-turn text environment.

    ``reset`` returns the opening messages (system, demonstrations, user). ``step`` takes
    the assistant's message and returns the observation messages to append, the reward,
    ``terminated`` (the episode reached its end: an answer), ``truncated`` (cut by a
    limit such as max turns) and an info dict. Envs never hold the model.

    Optional info keys the engine reads: ``tool_results``, ``answer``, ``correct``, and
    ``turn_reward``: a process reward for this turn (e.g. a tool call that ran), kept apart
    from the outcome ``reward`` and used by turn-level credit assignment (MT-GRPO, GiGPO,
    per-turn returns for PPO / REINFORCE++); ``format_ok``: whether this step followed the
    env's format (the ``reward.format_weight`` term needs every step that says to say true);
    ``reward_terms`` / ``turn_terms``: named shaping terms of the episode / of this turn,
    which the config's ``reward.terms`` weighs (an env declares them in ``reward_terms``:
    ``agentic_rl.envs.terms``).

    Roles (multi-agent): an env may declare ``roles`` (distinct names). Each role has its own
    conversation: ``reset`` opens the first role's (``info["role"]`` may name another) and
    each ``step`` takes the message of the role whose turn it was; ``info["role"]`` names
    whose turn comes next (default: the same role), and the observations go to that role's
    conversation (opening it, with its ``OPENING_INFO`` keys, the first time, or afresh with
    ``info["new_conversation"]``: a sub-agent called again, its earlier conversation kept as
    a sample of its own).
    ``info["role_rewards"]``: ``{role: number}`` for this step (roles it leaves out get the
    step's reward). Each role's turns train as its own trajectory in its own group.
    """

    num_tasks: int

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]: ...

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]: ...


def env_roles(env: Env) -> tuple[str, ...]:
    """The roles an env declares (``env.roles``: distinct names, the first opens an episode
    unless the reset info names another); empty for an env with one role."""
    roles = getattr(env, "roles", None)
    if roles is None:
        return ()
    names = tuple(roles) if isinstance(roles, (list, tuple)) else None
    if not names or not all(isinstance(r, str) and r and "@" not in r for r in names) or len(set(names)) < len(names):
        raise ConfigError(f"env.roles: expected distinct non-empty names without '@', got {roles!r}")
    return names


def reset_options(task_index: int, renderer: Any, training_step: int | None = None) -> dict:
    """What an episode resets its env with: the task, and, where the chat template describes
    tools itself, the request that the env leave its own description of them out (an env
    that does says so in its reset info: ``Trajectory.template_tools``), and how the template
    renders a tool message (an env whose format it matches leaves the framing of tool output
    to it: ``ToolCallParser.framed_by``); during training,
    the step (``training_step``: envs with schedules, such as ZeroSearch's noise, read it)."""
    options: dict = {"task_index": task_index}
    if training_step is not None:
        options["training_step"] = training_step
    if renderer is not None and renderer.template_tools:
        options["tools_prompt"] = "template"
        if (
            renderer.tool_output_template
        ):  # the env leaves the framing of tool output to the template where it matches its own
            options["tool_output_template"] = renderer.tool_output_template
    return options


def recorded_episode_metrics(env: Any, trajectory: Any) -> dict[str, Any]:
    """What an episode records of its env's optional ``episode_metrics(trajectory) ->
    dict[str, float]`` hook: ``{"episode_metrics": numbers}`` (``aggregate_metrics`` averages
    them by name), nothing for no hook or an empty dict, ``{"episode_metrics_error": ...}``
    when the hook fails (a metrics bug must not fail the episode)."""
    hook = getattr(env, "episode_metrics", None)
    if not callable(hook):
        return {}
    try:
        metrics = {str(key): float(value) for key, value in dict(hook(trajectory)).items()}
    except Exception as exc:
        return {"episode_metrics_error": f"{type(exc).__name__}: {exc}"}
    return {"episode_metrics": metrics} if metrics else {}


class EnvCheckError(AssertionError):
    pass


def _check_messages(messages: Any, where: str) -> None:
    if not isinstance(messages, list):
        raise EnvCheckError(f"{where}: expected a list of messages, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or not isinstance(message.get("content"), str)
        ):
            raise EnvCheckError(f"{where}[{i}]: expected a dict with str 'role' and 'content', got {message!r}")


def check_env(env: Env, *, seed: int = 0) -> None:
    """Raise ``EnvCheckError`` with a clear message if ``env`` breaks the Env contract.

    Checks: reset/step signatures and return types, opening messages end with a user
    turn, the same seed gives the same opening, ``terminated``/``truncated`` are bools,
    the reward is a finite float, and a step after an answer-less reply is well-formed.
    """
    if not isinstance(getattr(env, "num_tasks", None), int) or env.num_tasks < 1:
        raise EnvCheckError("env.num_tasks must be a positive int")
    result = env.reset(seed=seed)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EnvCheckError("reset() must return (messages, info)")
    messages, info = result
    _check_messages(messages, "reset() messages")
    if not messages or messages[-1]["role"] != "user":
        raise EnvCheckError("reset() messages must end with a user message")
    if not isinstance(info, dict):
        raise EnvCheckError("reset() info must be a dict")
    again, _ = env.reset(seed=seed)
    if again != messages:
        raise EnvCheckError("reset(seed=s) must be deterministic: two calls with the same seed gave different messages")
    env.reset(seed=seed)
    step = env.step({"role": "assistant", "content": "I am not sure."})
    if not (isinstance(step, tuple) and len(step) == 5):
        raise EnvCheckError("step() must return (observations, reward, terminated, truncated, info)")
    observations, reward, terminated, truncated, step_info = step
    _check_messages(observations, "step() observations")
    if (
        not isinstance(reward, (int, float))
        or isinstance(reward, bool)
        or reward != reward
        or abs(reward) == float("inf")
    ):
        raise EnvCheckError(f"step() reward must be a finite number, got {reward!r}")
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        raise EnvCheckError("step() terminated and truncated must both be bools")
    if not isinstance(step_info, dict):
        raise EnvCheckError("step() info must be a dict")
    try:
        roles = env_roles(env)
    except ConfigError as error:
        raise EnvCheckError(str(error)) from None
    for where, named in (("reset()", info.get("role")), ("step()", step_info.get("role"))):
        if named is not None and named not in roles:
            raise EnvCheckError(f"{where} info role {named!r} is not one of env.roles {roles}")

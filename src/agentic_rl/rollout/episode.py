"""``Episode``: one trajectory's state machine, the only code that changes episode state.

An episode starts from an env reset (prompt tokens rendered once), takes sampled turns
(tokens kept exactly as sampled, loss_mask 1) or chat replies, applies each env step's
outcome (reward, observation tokens with loss_mask 0, termination), and finishes once with
a termination reason. The schedulers (rollout/schedulers.py) only decide *when* each
episode samples and steps; what a turn or a step does to the trajectory lives here. An env
with ``roles`` plays one conversation per role (rollout/cast.py), each token-exact.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import RolloutConfig
from agentic_rl.envs.base import Env, env_roles, recorded_episode_metrics, reset_options
from agentic_rl.envs.terms import reported_terms
from agentic_rl.rollout.cast import Cast
from agentic_rl.rollout.context import summary_context, summary_request
from agentic_rl.templates.drift import template_drift_tokens
from agentic_rl.templates.thinking import thinking_context
from agentic_rl.types import Message, Trajectory, TrajectoryGroup, Turn

OnFinish = Callable[[Trajectory], None]
StepResult = Callable[[], tuple]
"""Returns an env step's ``(observations, reward, terminated, truncated, info)`` or raises
(``concurrent.futures.TimeoutError`` when the step outlived the episode's deadline)."""


@dataclass
class Episode:
    """A trajectory in progress with its env, limits and finish callback."""

    trajectory: Trajectory
    env: Env | None
    limits: RolloutConfig
    renderer: ChatRenderer | None
    """The chat renderer for token-level episodes; None for chat-level (remote) backends."""
    on_finish: OnFinish | None = None
    started: float = field(default_factory=time.monotonic)
    seed: int = 0
    """This episode's random stream (token draws depend on it and the position only)."""
    stopped_last_turn: bool = True
    hit_token_limit: bool = False
    """The last sampled turn filled ``max_total_tokens``."""
    history: list[Message] | None = None
    """Every message of the episode (with a context policy other than full; None: the
    trajectory's own messages are the whole episode)."""
    opening: int = 0
    """How many of the history's first messages the reset gave (kept by every policy)."""
    new_segment: bool = False
    """The last step started a new segment (the scheduler re-submits instead of extending)."""
    summarizing: bool = False
    """The next sampled turn is the summary the context policy asked for (``summarize``)."""
    cast: Cast | None = None
    """A multi-role env's roles (``trajectory`` is the role's whose turn is next); None: one role."""

    @classmethod
    def reset(
        cls,
        make_env: Callable[[], Env],
        task_index: int,
        group: TrajectoryGroup,
        *,
        limits: RolloutConfig,
        renderer: ChatRenderer | None,
        on_finish: OnFinish | None,
        training_step: int | None = None,
    ) -> Episode:
        """A new episode of ``task_index`` in ``group`` (appended to it). A failing env build
        or reset gives an episode already finished with an infrastructure error."""
        started = time.monotonic()
        try:
            env = make_env()
            messages, info = env.reset(options=reset_options(task_index, renderer, training_step))
        except Exception as exc:  # a broken env must not take the other episodes down
            trajectory = Trajectory(
                task_id=str(task_index),
                group_id=group.group_id,
                infra_error=f"reset failed: {type(exc).__name__}: {exc}",
            )
            group.trajectories.append(trajectory)
            episode = cls(trajectory, None, limits, renderer, on_finish, started)
            episode.finish("error")
            return episode
        group.task_id = str(info.get("task_id", task_index))
        trajectory = Trajectory(
            task_id=group.task_id, group_id=group.group_id, messages=list(messages), info=dict(info)
        )
        if renderer:
            trajectory.append(renderer.prompt_ids(messages, tools=trajectory.template_tools), 0)
            trajectory.prompt_length = len(trajectory.token_ids)
        group.trajectories.append(trajectory)
        episode = cls(trajectory, env, limits, renderer, on_finish, started)
        if limits.context in ("window", "fold") and renderer:
            episode.history = list(messages)
        episode.opening = len(messages)
        episode.cast = Cast.for_env(env_roles(env), limits.context)
        if episode.cast is not None:
            trajectory.info["episode"] = uuid.uuid4().hex[:12]
            if not episode._address(info.get("role", episode.cast.role)):
                return episode
            episode.cast.by_role[episode.cast.role] = trajectory
            trajectory.info["role"] = episode.cast.role
        if renderer and len(trajectory.token_ids) >= limits.max_total_tokens:
            episode.finish("max_tokens")  # the prompt alone fills the budget: nothing to sample
        return episode

    @property
    def trajectories(self) -> list[Trajectory]:
        """Every role's trajectory (a single-role episode: its one trajectory)."""
        return list(self.cast.by_role.values()) if self.cast and self.cast.by_role else [self.trajectory]

    def _address(self, role: object) -> bool:
        """Make ``role`` the next to play (an undeclared one finishes the episode with an
        infrastructure error). Returns whether the episode goes on."""
        error = self.cast.unknown(role)
        if error:
            return self.fail(error)
        self.cast.role = str(role)
        return True

    @property
    def finished(self) -> bool:
        return bool(self.trajectory.termination_reason)

    def start_clock(self) -> None:
        """Restart the wall clock (``rollout.timeout_s``, ``wall_time_s``) now: the
        continuous scheduler calls it when the episode gets a decode slot, so time spent
        queued for one is not held against the episode."""
        self.started = time.monotonic()

    @property
    def deadline(self) -> float:
        """Monotonic time by which the episode must end (its wall-clock timeout)."""
        return self.started + self.limits.timeout_s

    def budget(self) -> int:
        """Most tokens the next turn may sample."""
        return min(self.limits.max_new_tokens, self.limits.max_total_tokens - len(self.trajectory.token_ids))

    def take_completion(self, completion) -> tuple[Turn, Message]:
        """Append a sampled turn (token level); returns the turn and the assistant message
        to hand to ``env.step``."""
        trajectory = self.trajectory
        start = len(trajectory.token_ids)
        trajectory.append(completion.token_ids, 1, completion.logprobs)
        if completion.entropies is not None:  # one list per turn: ARPO branches on them
            trajectory.info.setdefault("turn_entropies", []).append(list(completion.entropies))
        self.stopped_last_turn = completion.finish_reason == "stop"
        self.hit_token_limit = len(trajectory.token_ids) >= self.limits.max_total_tokens
        text = self.renderer.response_text(completion.token_ids)
        turn = Turn(
            assistant_text=text,
            response_start=start,
            response_end=len(trajectory.token_ids),
            finish_reason=completion.finish_reason,
            weight_version=completion.weight_version,
            version_changes=[(start + offset, version) for offset, version in completion.version_changes or ()],
        )
        return turn, self._say(text)

    def take_reply(self, text: str, finish_reason: str, weight_version: int = 0) -> tuple[Turn, Message]:
        """Append a chat-level reply (no token data); returns the turn and the assistant message."""
        at = len(self.trajectory.token_ids)
        turn = Turn(text, at, at, finish_reason=finish_reason, weight_version=weight_version)
        return turn, self._say(text)

    def _say(self, text: str) -> Message:
        message = {"role": "assistant", "content": text}
        self.trajectory.messages.append(message)
        if self.history is not None:
            self.history.append(message)
        return message

    def env_step(self, message: Message) -> Callable[[], tuple | None]:
        """What the scheduler runs (in its thread pool) for the turn just taken: the env's step,
        or nothing for a summary turn. Decided here, in the scheduler's thread: the summary's
        ``apply_step`` clears ``summarizing`` without waiting for the pool."""
        if self.summarizing:
            return lambda: None
        return lambda: self.env.step(message)

    def apply_step(self, turn: Turn, result: StepResult) -> bool:
        """Apply one env step's outcome to the trajectory: finish the episode, or append the
        observation (with ``summarize``, and the request for a summary when the next prompt
        would pass the budget). After a summary turn, start the segment that follows it.
        Returns whether the episode goes on."""
        trajectory = self.trajectory
        if self.summarizing:
            return self._apply_summary(turn)
        try:
            observations, reward, terminated, truncated, info = result()
            turn.reward_terms, turn.turn_terms = reported_terms(info)  # malformed terms: the env's bug
        except FutureTimeout:  # the env (or a tool inside it) hung: infrastructure, not the policy's doing
            trajectory.turns.append(turn)
            return self.fail(f"env step ran past the {self.limits.timeout_s:g} s trajectory timeout", "timeout")
        except Exception as exc:  # an env or tool crash is infrastructure, not the policy's doing
            trajectory.turns.append(turn)
            return self.fail(f"{type(exc).__name__}: {exc}")
        turn.tool_results = list(info.get("tool_results", []))
        turn.reward = float(reward)
        turn.turn_reward = float(info.get("turn_reward", 0.0))
        trajectory.turns.append(turn)
        if self.cast is not None:
            credited = self.cast.credit(turn.reward, info)
            if isinstance(credited, str):  # a malformed role_rewards: the env's bug
                return self.fail(credited)
            turn.reward = credited
        trajectory.reward += turn.reward
        if "answer" in info:
            trajectory.answer = info["answer"]
        trajectory.correct = bool(info.get("correct", trajectory.correct))
        if "format_ok" in info:  # the env's format verdict: every step that gives one must pass
            trajectory.info["format_ok"] = bool(info["format_ok"]) and trajectory.info.get("format_ok", True)
        reason = self._termination(turn, terminated, truncated)
        if reason is None and self.cast is not None and info.get("role", self.cast.role) != self.cast.role:
            return self._hand_over(info, observations)
        return self._go_on(turn, observations, reason)

    def _go_on(self, turn: Turn | None, observations: list[Message], reason: str | None) -> bool:
        """Show ``observations`` to the current trajectory (``turn``: its last turn) unless
        ``reason`` ends the episode; returns whether it goes on."""
        trajectory = self.trajectory
        shown = self._next_context(observations) if reason is None else None
        if shown is not None:  # the policy cut what the model saw: a new segment, rendered afresh
            reason = self._start_segment(shown, observations)
        elif reason is None and self.renderer:
            reason, observations, shown = self._append_observations(turn, observations)
        if reason is not None:
            self.finish(reason)
            return False
        if shown is None:
            trajectory.messages.extend(observations)
            if self.history is not None:
                self.history.extend(observations)
        return True

    def _hand_over(self, info: dict, observations: list[Message]) -> bool:
        """The next turn is another role's: ``observations`` go to its conversation (opening it
        the first time or on ``info["new_conversation"]``: ``Cast.opened``), a sequence the
        scheduler re-submits (``new_segment``)."""
        cast = self.cast
        cast.stopped[cast.role] = self.stopped_last_turn
        if not self._address(info["role"]):
            return False
        self.new_segment = True
        known = cast.by_role.get(cast.role)
        if known is not None and not info.get("new_conversation"):
            self.trajectory, self.stopped_last_turn = known, cast.stopped.get(cast.role, True)
            self.hit_token_limit = len(known.token_ids) >= self.limits.max_total_tokens
            return self._go_on(known.turns[-1] if known.turns else None, observations, None)
        self.trajectory = cast.opened(self.trajectory, observations, info, self.renderer)
        self.stopped_last_turn, self.hit_token_limit = True, False
        if len(self.trajectory.token_ids) >= self.limits.max_total_tokens:
            self.finish("max_tokens")  # its opening alone fills the budget
            return False
        return True

    def _append_observations(
        self, turn: Turn | None, observations: list[Message]
    ) -> tuple[str | None, list[Message], list[Message] | None]:
        """Append the observations' tokens to the sequence (with ``summarize``, and the
        request for a summary when the next prompt would pass the budget). Where the grown
        sequence is not what the chat template renders for the same messages
        (``template_drift_tokens``, added up in ``info``), the episode goes on in a new
        segment rendered by the template instead. Returns (termination reason, the
        observations shown, the new segment's messages or None)."""
        trajectory = self.trajectory
        obs_ids = self.renderer.observation_ids(observations, stopped=self.stopped_last_turn)
        if self.limits.context == "summarize" and len(trajectory.token_ids) + len(obs_ids) > self.limits.context_tokens:
            # The next prompt would pass the budget: show the observations and ask for
            # the summary that will replace the history (the next sampled turn).
            observations = [*observations, summary_request(self.limits.context_summary_request)]
            obs_ids = self.renderer.observation_ids(observations, stopped=self.stopped_last_turn)
            self.summarizing = True
        shown = [*trajectory.messages, *observations]
        drift = template_drift_tokens(
            self.renderer, [*trajectory.token_ids, *obs_ids], shown, tools=trajectory.template_tools
        )
        trajectory.info["template_drift_tokens"] = trajectory.info.get("template_drift_tokens", 0) + drift
        if drift:
            return self._start_segment(shown, observations), observations, shown
        if len(trajectory.token_ids) + len(obs_ids) >= self.limits.max_total_tokens:
            return "max_tokens", observations, None
        trajectory.append(obs_ids, 0)
        if turn is not None:
            turn.observation_end = len(trajectory.token_ids)
        return None, observations, None

    def _apply_summary(self, turn: Turn) -> bool:
        """The summary turn was sampled (it stays in this segment: loss_mask 1, trained);
        the episode goes on in a new segment that shows the opening messages, the summary
        and, with ``context_keep_last``, the last turn."""
        trajectory = self.trajectory
        self.summarizing = False
        turn.summary = True
        trajectory.turns.append(turn)
        reason = "max_tokens" if self.hit_token_limit else "timeout" if time.monotonic() >= self.deadline else None
        if reason is None:
            # The segment's messages end with the summary request and the summary itself.
            shown = summary_context(
                trajectory.messages[:-2],
                turn.assistant_text,
                opening=self.opening,
                keep_last=self.limits.context_keep_last,
                header=self.limits.context_summary_header,
            )
            reason = self._start_segment(shown, [])
        if reason is not None:
            self.finish(reason)
            return False
        return True

    def _next_context(self, observations: list[Message]) -> list[Message] | None:
        """The next prompt's messages when the context policy or the thinking policy
        (``strip``) cuts what the current segment showed; None when the prompt simply grows."""
        current = [*self.trajectory.messages, *observations]
        shown = current
        if self.history is not None:
            from agentic_rl.rollout.context import context_messages

            shown = context_messages(
                self.limits.context,
                [*self.history, *observations],
                opening=self.opening,
                turns=self.limits.context_turns,
            )
        shown = thinking_context(self.limits.thinking, shown)
        return None if shown == current else shown

    def _start_segment(self, shown: list[Message], observations: list[Message]) -> str | None:
        """Continue in a new segment whose prompt is ``shown`` rendered with the chat
        template; the finished segment moves to ``trajectory.segments`` (the trajectory
        object stays the one its group holds: it is always the episode's last segment).
        Returns a termination reason when even the new prompt fills the token budget."""
        trajectory = self.trajectory
        if self.history is not None:
            self.history.extend(observations)
        finished = dataclasses.replace(
            trajectory, segments=[], info={k: v for k, v in trajectory.info.items() if k != "turn_entropies"}
        )
        trajectory.segments = [*trajectory.segments, finished]
        trajectory.messages, trajectory.turns = list(shown), []
        trajectory.info["prompt_messages"] = len(
            shown
        )  # earlier turns shown here are prompt, not this sample's (SFT examples: weight 0)
        trajectory.token_ids, trajectory.loss_mask, trajectory.sampler_logprobs = [], [], []
        trajectory.append(self.renderer.prompt_ids(shown, tools=trajectory.template_tools), 0)
        trajectory.prompt_length = len(trajectory.token_ids)
        self.new_segment = True
        return "max_tokens" if len(trajectory.token_ids) >= self.limits.max_total_tokens else None

    def _termination(self, turn: Turn, terminated: bool, truncated: bool) -> str | None:
        if terminated:
            return "max_tokens" if turn.finish_reason == "length" else "answered"
        if truncated:  # the env's max_turns: the one turn limit
            return "max_turns"
        if self.hit_token_limit:
            return "max_tokens"
        if time.monotonic() >= self.deadline:
            return "timeout"
        return None

    def fail(self, error: str, reason: str = "error") -> bool:
        """End the episode on an infrastructure error (the engine could not sample its turn,
        the env failed or hung); returns False: the episode does not go on."""
        self.trajectory.infra_error = error
        self.finish(reason)
        return False

    def finish(self, reason: str) -> None:
        """End the episode: record why and how long (every role's trajectory: its own
        reward, the episode's outcome), the env's episode metrics, release the env, and
        report the trajectory (once per episode)."""
        wall_time = time.monotonic() - self.started
        error = self.trajectory.infra_error
        if self.cast is not None:
            self.cast.close(error)
        for t in self.trajectories:
            t.termination_reason, t.wall_time_s = reason, wall_time
            for s in t.segments:  # every sample carries the episode's outcome
                s.reward, s.correct, s.answer, s.termination_reason = t.reward, t.correct, t.answer, reason
                s.infra_error, s.wall_time_s = error, wall_time
        trajectory = self.trajectory
        trajectory.info.update(recorded_episode_metrics(self.env, trajectory))
        close = getattr(self.env, "close", None)
        if callable(close):  # release per-trajectory resources (sandbox sessions)
            try:
                close()
            except Exception as exc:
                trajectory.info["close_error"] = f"{type(exc).__name__}: {exc}"
        if self.on_finish:
            self.on_finish(trajectory)

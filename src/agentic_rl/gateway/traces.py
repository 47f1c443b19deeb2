"""What the gateway served, per episode, token-exact, and the trajectories it makes.

Every call records the prompt ids exactly as the server built them, the sampled ids, their
log-probs and the weight version. Within an episode, a request whose history is the
previous call's history plus the reply the gateway gave plus new messages (a multi-turn
agent) is built by appending only the new messages' tokens to the previous prompt and
completion (``ChatRenderer.observation_ids``): the history is never re-tokenized, so the
calls chain into one trajectory whose sampled tokens are the ones the model produced.
A request that rewrites its history (a summarising agent, a sub-agent) starts a new
sample; all samples of an episode share its reward.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.types import Trajectory, Turn

MAX_EPISODES = 10_000
"""Episodes kept (the oldest are dropped first): a bound on the store's memory."""


@dataclass
class Call:
    """One served completion."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    weight_version: int
    finish_reason: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The request's messages (OpenAI format), to recognise the next call's history."""
    reply: dict[str, Any] = field(default_factory=dict)
    """The assistant message the gateway returned."""
    tools: str = ""
    """The request's tools (canonical JSON): a continuation must offer the same ones."""
    kind: str = "chat"
    """"chat" (``/v1/chat/completions``) or "completion" (``/v1/completions``: a raw prompt,
    no messages; a chat call never continues one by its messages)."""
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": self.logprobs,
            "weight_version": self.weight_version,
            "finish_reason": self.finish_reason,
            "created": self.created,
        }


@dataclass
class EpisodeTrace:
    calls: list[Call] = field(default_factory=list)
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    """The episode's random stream (set by a trainer): calls without a seed of their own
    draw from ``stream_seed(seed, request number)``, so a seeded run repeats."""
    requests: int = 0


def _calls_key(message: dict[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            arguments = function.get("arguments")
        out.append((function.get("name"), arguments))
    return out


def same_reply(given: Any, served: dict[str, Any]) -> bool:
    """Whether the client's assistant message ``given`` is the reply the gateway ``served``
    (content and tool calls; ids and formatting of the JSON arguments may differ)."""
    if not isinstance(given, dict) or given.get("role") != "assistant":
        return False
    return (given.get("content") or "") == (served.get("content") or "") and _calls_key(given) == _calls_key(served)


class EpisodeStore:
    """Episodes by id (thread-safe), at most ``max_episodes`` (oldest dropped)."""

    def __init__(self, max_episodes: int = MAX_EPISODES) -> None:
        self._episodes: OrderedDict[str, EpisodeTrace] = OrderedDict()
        self._lock = threading.Lock()
        self.max_episodes = max_episodes

    def _episode(self, episode_id: str) -> EpisodeTrace:
        episode = self._episodes.get(episode_id)
        if episode is None:
            episode = self._episodes[episode_id] = EpisodeTrace()
            while len(self._episodes) > self.max_episodes:
                self._episodes.popitem(last=False)
        return episode

    def continuation(self, episode_id: str, messages: list[Any], tools: str) -> tuple[Call, int] | None:
        """The episode's call that ``messages`` continue (its history, then its reply, then
        new messages) and where the new messages start; None when there is none."""
        with self._lock:
            episode = self._episodes.get(episode_id)
            calls = list(episode.calls) if episode else []
        for call in reversed(calls):
            n = len(call.messages)
            if (
                call.kind == "chat"
                and call.tools == tools
                and len(messages) > n + 1
                and messages[:n] == call.messages
                and same_reply(messages[n], call.reply)
            ):
                return call, n + 1
        return None

    def open(self, episode_id: str, *, seed: int | None = None) -> None:
        """Start episode ``episode_id`` (optionally with its random stream)."""
        with self._lock:
            self._episode(episode_id).seed = seed

    def request_seed(self, episode_id: str) -> int | None:
        """The seed for the episode's next call that names none (None: unseeded episode)."""
        from agentic_rl.seeds import stream_seed

        with self._lock:
            episode = self._episode(episode_id)
            episode.requests += 1
            return None if episode.seed is None else stream_seed(episode.seed, episode.requests - 1)

    def record(self, episode_id: str, call: Call) -> None:
        with self._lock:
            self._episode(episode_id).calls.append(call)

    def set_reward(self, episode_id: str, reward: float, info: dict[str, Any] | None = None) -> None:
        with self._lock:
            episode = self._episode(episode_id)
            episode.reward = float(reward)
            episode.info.update(info or {})

    def get(self, episode_id: str) -> EpisodeTrace | None:
        with self._lock:
            return self._episodes.get(episode_id)

    def pop(self, episode_id: str) -> EpisodeTrace | None:
        with self._lock:
            return self._episodes.pop(episode_id, None)


def calls_to_trajectories(
    calls: list[Call], *, reward: float, task_id: str = "", group_id: str = ""
) -> list[Trajectory]:
    """The samples an episode's calls make: a call whose prompt extends the previous call's
    prompt + completion joins its trajectory (the new tokens are observations, loss mask
    0; the completion is sampled, mask 1); any other call starts a new one. Every sample
    gets the episode's ``reward``."""
    trajectories: list[Trajectory] = []
    current: Trajectory | None = None
    for call in calls:
        if current is not None and call.prompt_ids[: len(current.token_ids)] == current.token_ids:
            current.append(call.prompt_ids[len(current.token_ids) :], 0)
            if current.turns:
                current.turns[-1].observation_end = len(current.token_ids)
        else:
            current = Trajectory(task_id=task_id, group_id=group_id, reward=reward, termination_reason="answered")
            current.append(call.prompt_ids, 0)
            current.prompt_length = len(call.prompt_ids)
            trajectories.append(current)
        start = len(current.token_ids)
        current.append(call.completion_ids, 1, call.logprobs)
        current.turns.append(
            Turn(
                assistant_text=str(call.reply.get("content") or ""),
                response_start=start,
                response_end=len(current.token_ids),
                finish_reason=call.finish_reason,
                weight_version=call.weight_version,
            )
        )
    return trajectories

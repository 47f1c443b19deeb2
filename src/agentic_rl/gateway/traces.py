"""What the gateway served, per episode, token-exact, and the trajectories it makes.

Every call records the prompt ids exactly as the server built them, the sampled ids, their
log-probs and the weight version. Within an episode, a request whose history is the
previous call's history plus the reply the gateway gave plus new messages (a multi-turn
agent) is built by appending only the new messages' tokens to the previous prompt and
completion (``ChatRenderer.observation_ids``): the history is never re-tokenized, so the
calls chain into one trajectory whose sampled tokens are the ones the model produced.
A request that rewrites its history (a summarising agent, a sub-agent) starts a new
sample; all samples of an episode share its reward.

Each call keeps the request's ``model`` field as its role (the name the agent program gave:
``model: "planner"``, ``model: "solver"``): a multi-agent program's calls split by role
(``calls_by_role``), and each role's calls make that role's samples as above. A program
whose calls all name one model (any name) has one role: nothing changes for it.

What is kept is bounded: a call keeps its token ids, log-probs and reply, and only digests
of its history and tools (gateway/history.py), never the request's messages; an episode
keeps at most ``max_episode_calls`` calls and ``max_episode_bytes`` (a request that would
pass either is refused with a 413 naming the bound), the store ``max_episodes`` episodes
and ``max_bytes`` in all (the episodes written to least recently are dropped first).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.gateway.chat import RequestError
from agentic_rl.types import Trajectory, Turn

MAX_EPISODES = 10_000
"""Episodes kept (those written to least recently are dropped first): a bound on the store's memory."""
MAX_EPISODE_CALLS = 1024
"""Calls kept per episode (``EpisodeStore(max_episode_calls=...)``)."""
MAX_EPISODE_BYTES = 64 << 20
"""Bytes kept per episode: 8 per token id and log-prob, the replies' and the reward info's JSON."""
MAX_STORED_BYTES = 1 << 30
"""Bytes kept by the whole store (the episodes written to least recently are dropped first)."""


@dataclass
class Call:
    """One served completion."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    weight_version: int
    finish_reason: str
    history: str = ""
    """The digest of the request's messages (``history.prefix_digests``), to recognise the next call's history."""
    history_length: int = 0
    """How many messages the request had."""
    reply: dict[str, Any] = field(default_factory=dict)
    """The assistant message the gateway returned."""
    tools: str = ""
    """The digest of the request's tools: a continuation must offer the same ones."""
    kind: str = "chat"
    """"chat" (``/v1/chat/completions``) or "completion" (``/v1/completions``: a raw prompt,
    no messages; a chat call never continues one by its messages)."""
    role: str = ""
    """The request's ``model`` field: the role that made the call ("" when it named none)."""
    created: float = field(default_factory=time.time)

    @property
    def nbytes(self) -> int:
        """What the call counts against its episode's ``max_episode_bytes``."""
        tokens = len(self.prompt_ids) + len(self.completion_ids) + len(self.logprobs)
        return 8 * tokens + len(json.dumps(self.reply)) + len(self.history) + len(self.tools)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "role": self.role,
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
    reward: float | dict[str, float] | None = None
    """The posted reward: one number (every role's) or ``{role: number}``."""
    info: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    """The episode's random stream (set by a trainer): calls without a seed of their own
    draw from ``stream_seed(seed, request number)``, so a seeded run repeats."""
    requests: int = 0
    nbytes: int = 0
    """What the episode keeps (``Call.nbytes`` and the reward info's JSON)."""


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
    """Episodes by id (thread-safe), bounded as the module docstring says."""

    def __init__(
        self,
        max_episodes: int = MAX_EPISODES,
        *,
        max_episode_calls: int = MAX_EPISODE_CALLS,
        max_episode_bytes: int = MAX_EPISODE_BYTES,
        max_bytes: int = MAX_STORED_BYTES,
    ) -> None:
        self._episodes: OrderedDict[str, EpisodeTrace] = OrderedDict()
        self._lock = threading.Lock()
        self.max_episodes = max_episodes
        self.max_episode_calls = max_episode_calls
        self.max_episode_bytes = max_episode_bytes
        self.max_bytes = max_bytes
        self.nbytes = 0
        """What all episodes keep."""

    def _episode(self, episode_id: str) -> EpisodeTrace:
        episode = self._episodes.get(episode_id)
        if episode is None:
            episode = self._episodes[episode_id] = EpisodeTrace()
            self._evict()
        return episode

    def _evict(self) -> None:
        while len(self._episodes) > self.max_episodes or (self.nbytes > self.max_bytes and len(self._episodes) > 1):
            self.nbytes -= self._episodes.popitem(last=False)[1].nbytes

    def _grow(self, episode_id: str, episode: EpisodeTrace, nbytes: int) -> None:
        episode.nbytes += nbytes
        self.nbytes += nbytes
        self._episodes.move_to_end(episode_id)  # the store drops the episodes written to least recently
        self._evict()

    def admit(self, episode_id: str, calls: int, nbytes: int) -> None:
        """Check that episode ``episode_id`` may keep ``calls`` more calls of about ``nbytes``;
        a RequestError (413) naming the bound when it may not."""
        with self._lock:
            episode = self._episode(episode_id)
            if len(episode.calls) + calls > self.max_episode_calls:
                raise RequestError(
                    f"episode {episode_id!r} keeps {len(episode.calls)} calls; this request would pass the "
                    f"{self.max_episode_calls} this server keeps per episode (max_episode_calls)",
                    "episode",
                    status=413,
                )
            if episode.nbytes + nbytes > self.max_episode_bytes:
                raise RequestError(
                    f"episode {episode_id!r} keeps {episode.nbytes} bytes; this request would pass the "
                    f"{self.max_episode_bytes} this server keeps per episode (max_episode_bytes)",
                    "episode",
                    status=413,
                )

    def continuation(
        self, episode_id: str, digests: list[str], messages: list[Any], tools: str
    ) -> tuple[Call, int] | None:
        """The episode's call that ``messages`` continue (its history, then its reply, then
        new messages) and where the new messages start; None when there is none.
        ``digests``: ``history.prefix_digests(messages)``; ``tools``: the tools' digest."""
        with self._lock:
            episode = self._episodes.get(episode_id)
            calls = list(episode.calls) if episode else []
        for call in reversed(calls):
            n = call.history_length
            if (
                call.kind == "chat"
                and call.tools == tools
                and len(messages) > n + 1
                and digests[n] == call.history
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
            episode = self._episode(episode_id)
            episode.calls.append(call)
            self._grow(episode_id, episode, call.nbytes)

    def set_reward(self, episode_id: str, reward: float | dict[str, float], info: dict[str, Any] | None = None) -> None:
        """Set the episode's reward (a number, or ``{role: number}``) and add ``info`` to its
        info (both counted against ``max_episode_bytes``)."""
        size = (len(json.dumps(info)) if info else 0) + (len(json.dumps(reward)) if isinstance(reward, dict) else 0)
        self.admit(episode_id, 0, size)
        with self._lock:
            episode = self._episode(episode_id)
            episode.reward = (
                {str(k): float(v) for k, v in reward.items()} if isinstance(reward, dict) else float(reward)
            )
            episode.info.update(info or {})
            self._grow(episode_id, episode, size)

    def get(self, episode_id: str) -> EpisodeTrace | None:
        with self._lock:
            return self._episodes.get(episode_id)

    def pop(self, episode_id: str) -> EpisodeTrace | None:
        with self._lock:
            episode = self._episodes.pop(episode_id, None)
            self.nbytes -= episode.nbytes if episode is not None else 0
            return episode


def calls_by_role(calls: list[Call]) -> dict[str, list[Call]]:
    """An episode's calls by role (``Call.role``), roles in the order they first called."""
    out: dict[str, list[Call]] = {}
    for call in calls:
        out.setdefault(call.role, []).append(call)
    return out


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

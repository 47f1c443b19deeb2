"""When each episode samples and steps: two schedulers over the same ``Episode`` API.

- ``run_per_turn``: one batched ``generate`` (or ``chat``) call per turn over every
  active episode, then their env steps concurrently. Works with any backend; the
  reference path.
- ``run_continuous``: a decode session (engines that offer ``session()``, e.g. the
  in-process HF engine) in which each episode decodes on its own schedule: one waiting
  for a tool does not hold the others, freed slots take new work, and each episode keeps
  its KV cache across turns (only observation tokens are encoded again). For the same
  seed it samples the same tokens as the per-turn path (counter-based sampling).

``scheduler_for`` picks one once, from the engine's capabilities.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout

from agentic_rl.engines.base import SamplingParams
from agentic_rl.rollout.episode import Episode, StepResult
from agentic_rl.seeds import derive_seed
from agentic_rl.types import Turn

Scheduler = Callable[[list[Episode], object, SamplingParams, ThreadPoolExecutor], None]


def scheduler_for(backend, *, continuous_batching: bool) -> Scheduler:
    """The continuous scheduler for token engines with decode sessions (unless turned off),
    else the per-turn one."""
    if continuous_batching and backend.interface == "tokens" and callable(getattr(backend, "session", None)):
        return run_continuous
    return run_per_turn


def run_per_turn(episodes: list[Episode], backend, sampling: SamplingParams, pool: ThreadPoolExecutor) -> None:
    """Run ``episodes`` to the end, one batched generation call per turn."""
    active = [e for e in episodes if not e.finished]
    turn_index = 0
    while active:
        seed = None if sampling.seed is None else derive_seed(sampling.seed, "turn", turn_index)
        if backend.interface == "tokens":
            turn_sampling = SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_new_tokens=sampling.max_new_tokens,
                seed=seed,
                return_entropy=sampling.return_entropy,
                row_seeds=[e.seed for e in active],
            )
            completions = _generate(backend, active, turn_sampling)
            sampled = []
            for episode, completion in zip(active, completions):
                if completion.error is not None:  # the engine failed this turn: an infrastructure error
                    episode.fail(completion.error)
                else:
                    sampled.append((episode, completion))
            active = [episode for episode, _ in sampled]
            taken = [episode.take_completion(completion) for episode, completion in sampled]
        else:
            # The env's tools go with each conversation (a server that parses calls returns
            # them structured; the backend writes them back in the env's format).
            tools = [e.trajectory.info.get("tools") for e in active]
            parser = getattr(active[0].env, "parser", None)
            replies = backend.chat(
                [e.trajectory.messages for e in active],
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=seed,
                tools=tools,
                parser=parser,
            )
            taken = [
                episode.take_reply(reply.text, reply.finish_reason, backend.weight_version)
                for episode, reply in zip(active, replies)
            ]
        futures = [pool.submit(episode.env_step(message)) for episode, (_, message) in zip(active, taken)]
        still_active = []
        for episode, (turn, _), future in zip(active, taken, futures):
            remaining = episode.deadline - time.monotonic()
            if episode.apply_step(
                turn, lambda future=future, remaining=remaining: future.result(timeout=max(remaining, 0.0))
            ):
                still_active.append(episode)
        active = still_active
        turn_index += 1


def _generate(backend, active: list[Episode], sampling: SamplingParams) -> list:
    """One completion per active episode: one ``generate`` call, or with an adapter per role
    (``backend.adapter_for``) one per adapter over its episodes (each row draws from its
    own seed, so the split does not change what is sampled)."""
    stop = active[0].renderer.stop_token_ids
    adapter_for = getattr(backend, "adapter_for", None)
    by_adapter: dict[str | None, list[int]] = {}
    for row, episode in enumerate(active):
        adapter = adapter_for(episode.cast.role if episode.cast else None) if adapter_for else None
        by_adapter.setdefault(adapter, []).append(row)
    completions: list = [None] * len(active)
    for adapter, rows in by_adapter.items():
        if adapter is not None:
            backend.select_adapter(adapter)
        part = dataclasses.replace(sampling, row_seeds=[sampling.row_seeds[row] for row in rows])
        outputs = backend.generate(
            [active[row].trajectory.token_ids for row in rows],
            part,
            stop_token_ids=stop,
            max_new_tokens=[active[row].budget() for row in rows],
        )
        for row, completion in zip(rows, outputs, strict=True):
            completions[row] = completion
    return completions


def _raise_timeout():
    raise FutureTimeout()


def run_continuous(
    episodes: list[Episode],
    backend,
    sampling: SamplingParams,
    pool: ThreadPoolExecutor,
    *,
    incoming: queue.Queue | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run ``episodes`` (token level) to the end in one continuous-batching decode session
    (with an adapter per role, one per adapter: :class:`_Sessions`).

    Service mode (a rollout worker): with ``incoming``, episodes put on that queue (seeds
    set) join the running session as they arrive, and the session lives until ``stop`` is
    set and nothing is left to do."""
    active: dict[int, Episode] = {}
    # Episodes wait here, not in the session, until it has a free slot (a session with
    # ``max_slots``; others take everything): an episode's clock starts when it gets one,
    # so rollout.timeout_s never counts time spent queued behind the rest of a big batch.
    pending: collections.deque[Episode] = collections.deque()
    keys = itertools.count()
    if not any(not e.finished for e in episodes) and incoming is None:
        return
    with contextlib.ExitStack() as scope:
        sessions = _Sessions(backend, sampling, scope)

        def admit(episode: Episode) -> None:
            if not episode.finished:
                pending.append(episode)

        def start_pending() -> None:
            while pending:
                slots = sessions.max_slots(pending[0])
                if slots is not None and len(active) >= slots:
                    return
                episode = pending.popleft()
                episode.start_clock()
                key = next(keys)
                active[key] = episode
                sessions.submit(key, episode)

        for episode in episodes:
            admit(episode)
        stepping: dict[Future, tuple[int, Turn]] = {}
        while True:
            if incoming is not None:
                for episode in _arrivals(incoming):
                    admit(episode)
            start_pending()
            busy = sessions.busy
            if not busy and not stepping:
                if incoming is None or stop.is_set():
                    return
                try:  # idle: wait for work
                    admit(incoming.get(timeout=0.05))
                except queue.Empty:
                    pass
                continue
            if busy:
                stepping.update(_start_env_steps(sessions, active, pool))
            if not stepping:
                continue
            done = _wait_for_env_steps(sessions, active, stepping, service=incoming is not None)
            now = time.monotonic()
            for future in list(stepping):
                key, turn = stepping[future]
                if future not in done and now < active[key].deadline:
                    continue
                del stepping[future]
                _apply_env_step(sessions, active, key, turn, future.result if future in done else _raise_timeout)


class _Sessions:
    """The decode sessions of a continuous run: one, or with an adapter per role
    (``backend.adapter_for``) one per adapter, since a session's sequences share its
    weights and KV cache. Each episode decodes in its current role's; a role change starts
    a new sequence anyway (``Episode.new_segment``), so it moves then. A step selects each
    busy session's adapter before stepping it; rows keep their own seeds, so the split
    samples what one session would."""

    def __init__(self, backend, sampling: SamplingParams, scope: contextlib.ExitStack) -> None:
        self.backend, self.sampling, self.scope = backend, sampling, scope
        self.adapter_for = getattr(backend, "adapter_for", None)
        self.by_adapter: dict[str | None, object] = {}
        self.adapter_of: dict[int, str | None] = {}

    def _session(self, episode: Episode):
        adapter = self.adapter_for(episode.cast.role if episode.cast else None) if self.adapter_for else None
        if adapter not in self.by_adapter:
            stop = episode.renderer.stop_token_ids
            self.by_adapter[adapter] = self.scope.enter_context(
                self.backend.session(self.sampling, stop_token_ids=stop)
            )
        return adapter, self.by_adapter[adapter]

    def max_slots(self, episode: Episode) -> int | None:
        """Sequences at most in flight across the sessions (None: no limit)."""
        return getattr(self._session(episode)[1], "max_slots", None)

    @property
    def busy(self) -> bool:
        return any(session.busy for session in self.by_adapter.values())

    def _select(self, adapter: str | None) -> None:
        if adapter is not None:  # before anything that may run or launch (a server's request names it) a forward
            self.backend.select_adapter(adapter)

    def submit(self, key: int, episode: Episode) -> None:
        adapter, session = self._session(episode)
        self.adapter_of[key] = adapter
        self._select(adapter)
        session.submit(key, episode.trajectory.token_ids, episode.budget(), episode.seed)

    def extend(self, key: int, token_ids: list[int], budget: int) -> None:
        self._select(self.adapter_of[key])
        self.by_adapter[self.adapter_of[key]].extend(key, token_ids, budget)

    def release(self, key: int) -> None:
        self.by_adapter[self.adapter_of.pop(key)].release(key)

    def step(self) -> list:
        """One decode step of every busy session: (key, completion) of the turns that ended."""
        finished = []
        for adapter, session in self.by_adapter.items():
            if session.busy:
                self._select(adapter)
                finished += session.step()
        return finished


def _arrivals(incoming: queue.Queue) -> Iterator[Episode]:
    """The episodes on ``incoming`` now, taken one at a time without waiting."""
    while True:
        try:
            yield incoming.get_nowait()
        except queue.Empty:
            return


def _start_env_steps(
    sessions: _Sessions, active: dict[int, Episode], pool: ThreadPoolExecutor
) -> dict[Future, tuple[int, Turn]]:
    """One decode step of the sessions: each finished turn's env step, submitted to ``pool``
    (future -> (episode key, turn)); an episode whose turn the engine failed fails and
    leaves its session."""
    stepping: dict[Future, tuple[int, Turn]] = {}
    for key, completion in sessions.step():
        if completion.error is not None:  # the engine failed this turn: an infrastructure error
            active.pop(key).fail(completion.error)
            sessions.release(key)
            continue
        turn, message = active[key].take_completion(completion)
        stepping[pool.submit(active[key].env_step(message))] = (key, turn)
    return stepping


def _wait_for_env_steps(
    sessions: _Sessions, active: dict[int, Episode], stepping: dict[Future, tuple[int, Turn]], *, service: bool
) -> set[Future]:
    """The env steps of ``stepping`` that are done: while others decode, those done now;
    otherwise after sleeping until one is, or until the earliest episode deadline (briefly,
    in ``service`` mode, when new work may arrive)."""
    deadline = min(active[key].deadline for key, _ in stepping.values())
    timeout = 0.0 if sessions.busy else max(deadline - time.monotonic(), 0.0)
    if service:
        timeout = min(timeout, 0.05)
    done, _ = wait(list(stepping), timeout=timeout, return_when=FIRST_COMPLETED)
    return done


def _apply_env_step(sessions: _Sessions, active: dict[int, Episode], key: int, turn: Turn, result: StepResult) -> None:
    """Apply episode ``key``'s env step ``result``; then the episode decodes on (its new
    tokens appended, or, when its context was rebuilt or its role changed, its new prompt
    submitted afresh, in its role's session), or, when it ended, leaves its session."""
    episode = active[key]
    if episode.apply_step(turn, result):
        if episode.new_segment:  # a new sequence (context rebuilt, or another role's turn): encoded afresh
            episode.new_segment = False
            sessions.release(key)
            sessions.submit(key, episode)
        else:
            sessions.extend(key, episode.trajectory.token_ids[turn.response_end :], episode.budget())
    else:
        del active[key]
        sessions.release(key)

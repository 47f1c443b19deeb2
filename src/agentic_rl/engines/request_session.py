"""The continuous scheduler's session over a server engine: the decode-session API
(engines/decode_session.py) where every turn is one HTTP request in flight.

:class:`RequestSession` keeps each sequence's context (prompt, sampled turns, appended
observations) and seed, launches a request per submitted or extended sequence, holds new
requests while staged weights wait for the ones in flight to finish, and returns the turns
that finished on each ``step``. It drives a backend through :class:`RequestBackend`, the
part of :class:`~agentic_rl.engines.remote.RemoteTokenBackend` it needs (building a request
body, submitting it, applying staged weights), so this module does not import the backend.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Protocol

from agentic_rl.engines.base import Completion, SamplingParams
from agentic_rl.engines.staged import StagedWeights
from agentic_rl.seeds import stream_seed


class RequestBackend(Protocol):
    """What a :class:`RequestSession` asks of its backend (a ``RemoteTokenBackend``)."""

    staged: StagedWeights
    supports_streaming: bool

    def request_body(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        stop_token_ids: Sequence[int],
        max_new_tokens: int,
        seed: int,
    ) -> dict[str, Any]: ...

    def submit(self, body: dict[str, Any]) -> Future: ...

    def submit_streamed(self, body: dict[str, Any], partial: list[int], cancelled: threading.Event) -> Future: ...

    def apply_staged(self) -> int | None: ...


class RequestSession:
    """The decode-session API (engines/decode_session.py) over concurrent requests: every
    submitted or extended sequence is one request in flight; ``step`` returns the turns
    that finished meanwhile. A sequence's context is its prompt, its sampled turns and the
    observations appended by ``extend``; turn t of a sequence samples from stream
    ``(seed, t)``."""

    POLL_S = 0.01
    """How long ``step`` waits for a request to finish before returning nothing (the
    scheduler then checks on its env steps)."""

    def __init__(self, backend: RequestBackend, sampling: SamplingParams, stop_token_ids: Sequence[int]) -> None:
        self.backend = backend
        self.sampling = sampling
        self.stop_token_ids = list(stop_token_ids)
        self.contexts: dict[Hashable, list[int]] = {}
        self.seeds: dict[Hashable, int] = {}
        self.turns: dict[Hashable, int] = {}
        self.in_flight: dict[Future, Hashable] = {}
        self.held: list[tuple[Hashable, int]] = []
        """Requests held back while staged weights wait for the requests in flight to finish."""
        self.streamed = sampling.stream_tokens and backend.supports_streaming
        """Turns are streamed: ``sampled`` shows their tokens, ``cancel`` ends them on the server."""
        self.partial: dict[Hashable, list[int]] = {}
        self.cancels: dict[Future, threading.Event] = {}

    def __enter__(self) -> RequestSession:
        return self

    def __exit__(self, *exc_info) -> None:
        for future in self.in_flight:
            future.cancel()
            if future in self.cancels:
                self.cancels[future].set()

    @property
    def busy(self) -> bool:
        return bool(self.in_flight or self.held)

    def _launch(self, key: Hashable, max_new_tokens: int) -> None:
        if self.backend.staged.pending:
            self.held.append((key, max_new_tokens))
            return
        seed = stream_seed(self.seeds[key], self.turns[key])
        body = self.backend.request_body(
            self.contexts[key],
            self.sampling,
            stop_token_ids=self.stop_token_ids,
            max_new_tokens=max(int(max_new_tokens), 1),
            seed=seed,
        )
        if not self.streamed:
            self.in_flight[self.backend.submit(body)] = key
            return
        self.partial[key], cancelled = [], threading.Event()
        future = self.backend.submit_streamed(body, self.partial[key], cancelled)
        self.in_flight[future], self.cancels[future] = key, cancelled

    def submit(self, key: Hashable, token_ids: Sequence[int], max_new_tokens: int, seed: int) -> None:
        if key in self.contexts:
            raise ValueError(f"sequence {key!r} is already in this session")
        if not token_ids:
            raise ValueError(f"sequence {key!r}: token_ids is empty; a prompt needs at least one token")
        self.contexts[key], self.seeds[key], self.turns[key] = list(token_ids), int(seed), 0
        self._launch(key, max_new_tokens)

    def extend(self, key: Hashable, token_ids: Sequence[int], max_new_tokens: int) -> None:
        if key in self.in_flight.values() or any(key == held for held, _ in self.held):
            raise ValueError(f"sequence {key!r} is not paused after a finished turn")
        self.contexts[key].extend(token_ids)
        self._launch(key, max_new_tokens)

    def cancel(self, key: Hashable) -> None:
        """Drop a sequence's request in flight (its client went away) and forget it."""
        for future, owner in list(self.in_flight.items()):
            if owner == key:
                future.cancel()
                if future in self.cancels:
                    self.cancels.pop(future).set()  # closes the stream: the server drops the request
                del self.in_flight[future]
        self.release(key)

    def sampled(self, key: Hashable) -> list[int]:
        """The tokens of the key's turn in flight so far (streamed turns; otherwise a server
        returns whole turns and nothing is visible before the turn ends)."""
        return list(self.partial.get(key, ()))

    def release(self, key: Hashable) -> None:
        for mapping in (self.contexts, self.seeds, self.turns, self.partial):
            mapping.pop(key, None)
        self.held = [(held, budget) for held, budget in self.held if held != key]

    def step(self) -> list[tuple[Hashable, Completion]]:
        if self.backend.staged.pending and not self.in_flight:
            self.backend.apply_staged()  # between turns: nothing in flight samples across versions
        if self.held and not self.backend.staged.pending:
            held, self.held = self.held, []
            for key, budget in held:
                self._launch(key, budget)
        if not self.in_flight:
            return []
        done, _ = wait(list(self.in_flight), timeout=self.POLL_S, return_when=FIRST_COMPLETED)
        finished = []
        for future in done:
            key = self.in_flight.pop(future)
            self.cancels.pop(future, None)
            self.partial.pop(key, None)
            completion = future.result()
            self.contexts[key].extend(completion.token_ids)
            self.turns[key] += 1
            finished.append((key, completion))
        return finished

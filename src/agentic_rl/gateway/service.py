"""Completions for concurrent requests, batched: one service thread steps a decode session
per sampling setting (temperature, top_p, top_logprobs) of the requests in flight, so requests that
arrive while others decode join the same batch (continuous batching, engines/decode_session.py).

Each request is one completion of a token prompt; its result is the engine's
``Completion`` (token ids exactly as sampled, their log-probs, the weight version). New
weights are staged with ``stage_weights`` and taken over between decode steps, as in a
rollout worker.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from agentic_rl.engines.base import SamplingParams

KEEP_IDLE_S = 5.0
"""How long an idle decode session stays open by default (``CompletionService.keep_idle_s``)."""


@dataclass
class _Request:
    prompt: list[int]
    max_tokens: int
    seed: int
    temperature: float
    top_p: float
    top_logprobs: int
    future: Future
    on_tokens: Callable[[list[int]], None] | None = None
    adapter: str | None = None
    """The LoRA adapter that samples it (its role's; None: the engine's model as it is)."""
    sent: int = 0
    """Tokens already handed to ``on_tokens``."""


class CompletionService:
    """``submit(prompt_ids, ...) -> Future[Completion]`` over ``backend`` (a token engine with
    decode sessions: the in-process HF engine, a vLLM server). ``stop_token_ids``: the chat
    template's end-of-turn tokens.

    ``keep_idle_s``: how long a session with nothing to decode stays open, so that an agent's
    next turn, sent after its tool ran, reuses it instead of paying the session's setup
    (packing the weights) again. 0 when a trainer shares the engine's weights: while a
    session is open, the model's gradient-free forwards use its packed copies, and the
    trainer's own (old log-probs after an update) must see the live weights."""

    IDLE_WAIT_S = 0.05

    def __init__(
        self,
        backend,
        *,
        stop_token_ids: Sequence[int],
        keep_idle_s: float = KEEP_IDLE_S,
        adapter_for: Callable[[str | None], str] | None = None,
    ) -> None:
        if backend.interface != "tokens" or not callable(getattr(backend, "session", None)):
            raise ValueError("the gateway needs a token engine with decode sessions (backend.kind hf or vllm)")
        self.backend = backend
        self.supports_top_logprobs = bool(getattr(backend, "supports_top_logprobs", False))
        """Whether completions can carry the most likely alternatives per token (``top_logprobs``)."""
        self.stop_token_ids = list(stop_token_ids)
        self.keep_idle_s = float(keep_idle_s)
        self.adapter_for = adapter_for
        """A request's role (its ``model``) -> the LoRA adapter that samples it (``lora.roles``;
        the engine's ``select_adapter`` switches); None: one policy for every role."""
        self._incoming: queue.Queue[_Request] = queue.Queue()
        self._stop = threading.Event()
        self._keys = itertools.count()
        self._failure: BaseException | None = None
        self._active = 0
        self._thread = threading.Thread(target=self._serve, name="gateway-engine", daemon=True)
        self._thread.start()

    def submit(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        seed: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_logprobs: int = 0,
        on_tokens: Callable[[list[int]], None] | None = None,
        role: str | None = None,
    ) -> Future:
        """One completion of ``prompt``; draws depend only on ``seed`` and the position.
        ``top_logprobs``: also the this-many most likely tokens per position (engines with
        ``supports_top_logprobs``; such requests decode in a session of their own).
        ``on_tokens(new_ids)`` (called on the service thread) streams the tokens as they are
        sampled (the in-process engine; vLLM's streamed answers; other servers' turns come whole).
        Cancelling the future stops the sequence and frees its slot. ``role``: the request's
        ``model``, which picks the adapter that samples it (``adapter_for``)."""
        future: Future = Future()
        if self._failure is not None or not self._thread.is_alive():
            future.set_exception(RuntimeError(f"the gateway's engine stopped: {self._failure!r}"))
            return future
        if top_logprobs and not self.supports_top_logprobs:
            raise ValueError(f"top_logprobs: {type(self.backend).__name__} does not return alternatives")
        self._incoming.put(
            _Request(
                list(prompt),
                int(max_tokens),
                int(seed),
                float(temperature),
                float(top_p),
                int(top_logprobs),
                future,
                on_tokens,
                self.adapter_for(role) if self.adapter_for is not None else None,
            )
        )
        return future

    @property
    def active(self) -> int:
        """Requests being decoded now."""
        return self._active

    def stage_weights(self, weights, version: int) -> None:
        """New weights, taken over between two decode steps (requests in flight continue)."""
        self.backend.stage_weights(weights, version)

    @property
    def weight_version(self) -> int:
        return self.backend.weight_version

    def _serve(self) -> None:
        sessions: dict[tuple[float, float, int, str | None], tuple[object, dict[int, _Request]]] = {}
        idle_since: dict[tuple[float, float, int, str | None], float] = {}
        try:
            while not self._stop.is_set():
                self._close_idle(sessions, idle_since)
                self._admit(sessions, idle_since, block=not any(session.busy for session, _ in sessions.values()))
                for setting in list(sessions):
                    session, requests = sessions[setting]
                    for key, request in list(requests.items()):
                        if request.future.cancelled():  # the client went away: free its slot now
                            session.cancel(key)
                            del requests[key]
                    if session.busy:
                        self._use(setting[-1])
                        for key, completion in session.step():
                            session.release(key)
                            request = requests.pop(key)
                            self._stream(request, completion.token_ids)
                            if not request.future.cancelled():
                                request.future.set_result(completion)
                        for key, request in requests.items():
                            if request.on_tokens is not None:
                                self._stream(request, session.sampled(key))
                    if session.busy:
                        idle_since.pop(setting, None)
                    else:
                        idle_since.setdefault(setting, time.monotonic())
                self._active = sum(len(requests) for _, requests in sessions.values())
            for session, _ in sessions.values():  # closed: free what the kept sessions hold
                session.__exit__(None, None, None)
        except BaseException as error:  # every waiting request must learn of it
            self._failure = error
            for _, requests in sessions.values():
                for request in requests.values():
                    if not request.future.done():
                        request.future.set_exception(error)
            raise

    def _close_idle(self, sessions: dict, idle_since: dict) -> None:
        """Close the sessions idle for ``keep_idle_s`` (their packed weights and cache freed),
        and at once those whose weights are behind the engine's: a trainer that updated the
        weights in place (shared with the engine) has counted a new version, and a session's
        packed copy would still hold the old ones."""
        now = time.monotonic()
        for setting, since in list(idle_since.items()):
            if self._stale(sessions[setting][0]) or now - since >= self.keep_idle_s:
                sessions.pop(setting)[0].__exit__(None, None, None)
                del idle_since[setting]

    def _stale(self, session) -> bool:
        return getattr(session, "weight_version", self.backend.weight_version) != self.backend.weight_version

    @staticmethod
    def _stream(request: _Request, tokens: list[int]) -> None:
        if request.on_tokens is not None and len(tokens) > request.sent:
            request.on_tokens(tokens[request.sent :])
            request.sent = len(tokens)

    def _admit(self, sessions: dict, idle_since: dict, *, block: bool) -> None:
        """Start the waiting requests (waiting briefly for one when nothing runs)."""
        while True:
            try:
                request = self._incoming.get(timeout=self.IDLE_WAIT_S) if block else self._incoming.get_nowait()
            except queue.Empty:
                return
            block = False
            if request.future.cancelled():
                continue
            setting = (request.temperature, request.top_p, request.top_logprobs, request.adapter)
            if setting in idle_since and self._stale(sessions[setting][0]):  # new weights came while it waited
                sessions.pop(setting)[0].__exit__(None, None, None)
                del idle_since[setting]
            if setting not in sessions:
                # stream_tokens: streamed replies and cancels reach a server engine's requests too
                sampling = SamplingParams(
                    temperature=request.temperature,
                    top_p=request.top_p,
                    max_new_tokens=request.max_tokens,
                    top_logprobs=request.top_logprobs,
                    stream_tokens=True,
                )
                session = self.backend.session(sampling, stop_token_ids=self.stop_token_ids)
                sessions[setting] = (session.__enter__(), {})
            session, requests = sessions[setting]
            key = next(self._keys)
            self._use(request.adapter)  # a submit may run the prompt's forward
            try:
                session.submit(key, request.prompt, request.max_tokens, request.seed)
            except ValueError as error:  # this request's own fault (an empty prompt): it alone fails
                request.future.set_exception(error)
                continue
            requests[key] = request

    def _use(self, adapter: str | None) -> None:
        """Switch the engine's model to ``adapter`` before it forwards for a session of it."""
        if adapter is not None:
            self.backend.select_adapter(adapter)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

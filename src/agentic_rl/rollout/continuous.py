"""The rollout loop with continuous batching and KV reuse across turns.

Each trajectory is a sequence in the backend's decode session. When one finishes a turn,
its env step starts in the thread pool while the others keep decoding; when the step
returns, the observation tokens are appended to that trajectory's cache (nothing before
them is encoded again) and it rejoins the batch. Episode semantics (termination
reasons, timeouts, infra errors, token spans) are the engine's own helpers, shared with
the per-turn path.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures import TimeoutError as FutureTimeout

from agentic_rl.rollout.backends.base import SamplingParams
from agentic_rl.rollout.chat import ChatRenderer
from agentic_rl.types import Turn


def _raise_timeout():
    raise FutureTimeout()


def run_continuous(active: list, backend, renderer: ChatRenderer, limits, pool, on_finish) -> None:
    """Run ``active`` (engine ``_Active`` states, token level) to the end."""
    from agentic_rl.rollout.engine import _after_step, _take_completion

    sampling = SamplingParams(temperature=limits.temperature, top_p=limits.top_p, max_new_tokens=limits.max_new_tokens, return_entropy=limits.return_entropy)
    with backend.session(sampling, stop_token_ids=renderer.stop_token_ids) as session:
        states = {index: state for index, state in enumerate(active)}

        def budget(state) -> int:
            return min(limits.max_new_tokens, limits.max_total_tokens - len(state.trajectory.token_ids))

        for key, state in states.items():
            session.submit(key, state.trajectory.token_ids, budget(state), state.seed)
        stepping: dict[Future, tuple[int, Turn, bool]] = {}
        while session.busy or stepping:
            if session.busy:
                for key, completion in session.step():
                    state = states[key]
                    start = len(state.trajectory.token_ids)
                    text = _take_completion(state, completion, renderer)
                    turn = Turn(assistant_text=text, response_start=start, response_end=len(state.trajectory.token_ids), finish_reason=completion.finish_reason)
                    message = {"role": "assistant", "content": text}
                    state.trajectory.messages.append(message)
                    full = len(state.trajectory.token_ids) >= limits.max_total_tokens
                    stepping[pool.submit(state.env.step, message)] = (key, turn, full)
            if not stepping:
                continue
            now = time.monotonic()
            deadline = min(states[key].started + limits.timeout_s for key, _, _ in stepping.values())
            # While others decode, only collect env steps that are done; otherwise sleep until
            # one is, or until the earliest trajectory deadline.
            done, _ = wait(list(stepping), timeout=0 if session.busy else max(deadline - now, 0.0), return_when=FIRST_COMPLETED)
            now = time.monotonic()
            for future in list(stepping):
                key, turn, full = stepping[future]
                state = states[key]
                timed_out = now - state.started >= limits.timeout_s
                if future not in done and not timed_out:
                    continue
                del stepping[future]
                result = future.result if future in done else _raise_timeout
                response_end = turn.response_end
                if _after_step(state, turn, full, result, renderer, limits, on_finish):
                    session.extend(key, state.trajectory.token_ids[response_end:], budget(state))
                else:
                    session.release(key)

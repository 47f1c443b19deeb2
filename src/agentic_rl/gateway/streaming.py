"""Completions streamed as they are sampled: several choices interleaved, and text held back
only where a stop string or a tool call may still take it back.

``sampled`` turns the service's per-token callbacks into one async stream of events for
all the choices of a request; ``LiveText`` says how much of a choice's text is final.
What a stream sends adds up to the non-streamed response: the text held back is sent,
or not, once the choice is finished and cut exactly as a whole response is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from agentic_rl.chat import ChatRenderer
from agentic_rl.gateway.service import CompletionService


class LiveText:
    """The text of one choice that is safe to send while it is still sampled.

    ``markers``: strings the final text is cut at (stop strings, a tool call's opening
    tag): text from one of them on is held, and so is an ending that may grow into one.
    ``hold_trailing_space``: also hold whitespace at the end (a tool call that follows
    drops it from the content). ``hold_all``: send nothing until the end (a tool-call
    format whose opening is unknown)."""

    def __init__(
        self,
        renderer: ChatRenderer,
        markers: Sequence[str],
        *,
        hold_trailing_space: bool = False,
        hold_all: bool = False,
    ) -> None:
        self.renderer = renderer
        self.markers = [m for m in markers if m]
        self.hold_trailing_space = hold_trailing_space
        self.hold_all = hold_all
        self.ids: list[int] = []
        self.sent = ""

    def add(self, ids: list[int]) -> str:
        """Take newly sampled ids; return the text that became safe to send (maybe empty)."""
        self.ids += ids
        if self.hold_all:
            return ""
        text = self.renderer.response_text(self.ids)
        if not text.startswith(self.sent):  # decoding more ids changed earlier text: wait for the end
            return ""
        end = self._safe_end(text)
        if end <= len(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) : end], text[:end]
        return delta

    def _safe_end(self, text: str) -> int:
        end = len(text)
        while end and text[end - 1] == "\ufffd":  # a multi-byte character not complete yet
            end -= 1
        for marker in self.markers:
            found = text.find(marker)
            if found >= 0:
                end = min(end, found)
                continue
            for size in range(min(len(marker) - 1, len(text)), 0, -1):  # an ending that may become the marker
                if text.endswith(marker[:size]):
                    end = min(end, len(text) - size)
                    break
        if self.hold_trailing_space:
            end = len(text[:end].rstrip())
        return end

    def rest(self, final: str | None) -> str | None:
        """What is left to send of the choice's ``final`` text (None: nothing, and the final
        text is None too); "" only where the final text is empty and nothing was sent, so
        a client that adds the pieces up gets "" rather than no text."""
        if final is None:
            return None
        if not final.startswith(self.sent):  # cannot happen for prefix-stable decoding; send what extends it
            return None
        rest = final[len(self.sent) :]
        return rest if rest or not self.sent else None


async def sampled(service: CompletionService, jobs: Sequence[dict]) -> AsyncIterator[tuple[int, list[int] | object]]:
    """``(choice index, new token ids)`` as the jobs' tokens are sampled, interleaved, then
    ``(choice index, Completion)`` when a choice finishes (an exception instead when the
    engine failed). Each job is ``CompletionService.submit``'s keyword arguments. Leaving
    the iteration early (a client that went away) cancels the unfinished jobs: the engine
    frees their slots at its next decode step."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def put(item) -> None:  # called on the service thread
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shutting down): nobody listens
            pass

    futures = []
    try:
        for index, job in enumerate(jobs):
            future = service.submit(**job, on_tokens=lambda ids, index=index: put((index, list(ids))))
            future.add_done_callback(lambda _, index=index: put((index, None)))  # after the last tokens
            futures.append(future)
        remaining = len(futures)
        while remaining:
            index, ids = await queue.get()
            if ids is not None:
                yield index, ids
                continue
            remaining -= 1
            future = futures[index]
            if future.cancelled():
                continue
            error = future.exception()
            yield index, error if error is not None else future.result()
    finally:
        for future in futures:
            future.cancel()  # no-op once done

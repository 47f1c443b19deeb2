"""Context policies: what each turn's prompt shows of a long episode.

- ``full``: the whole episode (the prompt only grows: one token-exact trajectory, KV reused
  across turns);
- ``window``: the opening messages (system, demonstrations, task) and the last ``turns``
  turns (RAGEN's sliding window);
- ``fold``: the whole episode, with tool outputs older than ``turns`` turns replaced by a
  short stub (long tool results stop filling the context; what the model did stays);
- ``summarize``: the prompt grows until the next one would pass a token budget; then the
  model itself is asked for a summary (:data:`SUMMARY_REQUEST`), and the summary replaces
  the history: the next prompt is the opening messages, the summary
  (:func:`summary_context`) and optionally the last turn (MEM1 / MemAgent).

``window`` and ``fold`` are pure functions of the episode's messages so far. When their
result extends the prompt the model saw last, the episode goes on as one sample; when it
does not (the window slid, an output was folded), the episode starts a new segment whose
prompt is rendered from the policy's messages: every sample is exactly what the model was
given. ``summarize`` depends on the rendered length, so the episode (rollout/episode.py)
decides when; the summary turn ends its segment as a sampled, trained turn, and the new
segment's prompt is rendered from :func:`summary_context`.
"""

from __future__ import annotations

from agentic_rl.types import Message

CONTEXT_POLICIES = ("full", "window", "fold", "summarize")
FOLD_STUB = "[earlier tool output omitted]"
SUMMARY_REQUEST = (
    "Your context is full. Write a summary of the episode so far: the task, every fact you found that you may still need, "
    "and what is left to do. It replaces the conversation, so leave nothing out you will need. Do not call tools now."
)
"""The user message that asks for a summary (appended after the observations of the turn
that filled the budget)."""
SUMMARY_HEADER = "Summary of the episode so far, written by you when your context was full:\n\n"
"""Opens the user message that carries the summary into the new context."""


def context_messages(policy: str, history: list[Message], *, opening: int, turns: int) -> list[Message]:
    """The messages the next prompt shows under ``policy``. ``history``: the episode's
    messages in order; its first ``opening`` are the reset's (system, demonstrations,
    task); a turn starts at each assistant message after them. ``summarize`` shows the
    whole history here (its cut depends on tokens: :func:`summary_context`)."""
    if policy not in CONTEXT_POLICIES:
        raise ValueError(f"rollout.context: expected one of {', '.join(CONTEXT_POLICIES)}, got {policy!r}")
    starts = [i for i in range(opening, len(history)) if history[i].get("role") == "assistant"]
    if policy in ("full", "summarize") or len(starts) <= turns:  # summarize cuts by tokens: the episode decides
        return list(history)
    kept_from = starts[-turns]
    if policy == "window":
        return [*history[:opening], *history[kept_from:]]
    folded = list(history)
    for i in range(opening, kept_from):
        if history[i].get("role") == "tool" and history[i].get("content") != FOLD_STUB:
            folded[i] = {**history[i], "content": FOLD_STUB}
    return folded


def summary_request(text: str | None = None) -> Message:
    """The user message asking the model for its summary: ``text``, or
    :data:`SUMMARY_REQUEST` when None (``rollout.context_summary_request``)."""
    return {"role": "user", "content": SUMMARY_REQUEST if text is None else text}


def summary_context(
    messages: list[Message], summary: str, *, opening: int, keep_last: bool, header: str | None = None
) -> list[Message]:
    """The messages of the context that follows a summary: the first ``opening`` of
    ``messages`` (system, demonstrations, task), the summary as a user message opened by
    ``header`` (:data:`SUMMARY_HEADER` when None), and, with ``keep_last``, the last turn of
    ``messages`` verbatim (its assistant message and the observations after it).
    ``messages``: the segment's messages before the summary request."""
    shown = [
        *messages[:opening],
        {"role": "user", "content": (SUMMARY_HEADER if header is None else header) + summary.strip()},
    ]
    starts = [i for i in range(opening, len(messages)) if messages[i].get("role") == "assistant"]
    if keep_last and starts:
        shown += messages[starts[-1] :]
    return shown

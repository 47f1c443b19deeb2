"""Context policies: what each turn's prompt shows of a long episode.

- ``full``: the whole episode (the prompt only grows: one token-exact trajectory, KV reused
  across turns);
- ``window``: the opening messages (system, demonstrations, task) and the last ``turns``
  turns (RAGEN's sliding window);
- ``fold``: the whole episode, with tool outputs older than ``turns`` turns replaced by a
  short stub (long tool results stop filling the context; what the model did stays).

A policy is a pure function of the episode's messages so far. When its result extends the
prompt the model saw last, the episode goes on as one sample; when it does not (the window
slid, an output was folded), the episode starts a new segment whose prompt is rendered
from the policy's messages: every sample is exactly what the model was given.
"""

from __future__ import annotations

from agentic_rl.types import Message

CONTEXT_POLICIES = ("full", "window", "fold")
FOLD_STUB = "[earlier tool output omitted]"


def context_messages(policy: str, history: list[Message], *, opening: int, turns: int) -> list[Message]:
    """The messages the next prompt shows under ``policy``. ``history``: the episode's
    messages in order; its first ``opening`` are the reset's (system, demonstrations,
    task); a turn starts at each assistant message after them."""
    if policy not in CONTEXT_POLICIES:
        raise ValueError(f"rollout.context: expected one of {', '.join(CONTEXT_POLICIES)}, got {policy!r}")
    starts = [i for i in range(opening, len(history)) if history[i].get("role") == "assistant"]
    if policy == "full" or len(starts) <= turns:
        return list(history)
    kept_from = starts[-turns]
    if policy == "window":
        return [*history[:opening], *history[kept_from:]]
    folded = list(history)
    for i in range(opening, kept_from):
        if history[i].get("role") == "tool" and history[i].get("content") != FOLD_STUB:
            folded[i] = {**history[i], "content": FOLD_STUB}
    return folded

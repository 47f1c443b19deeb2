"""The ``thinking`` policy: what later prompts show of a turn's reasoning.

Reasoning models write ``<think>...</think>`` before their answer (DeepSeek-R1's
generation prompt opens the block itself, so its turns hold only the closing tag).
``keep`` shows every assistant turn as it was sampled; ``strip`` removes the reasoning of
every earlier turn before the next prompt is rendered, as DeepSeek-R1's template always
does and Qwen3's does once a new user message follows. The rollout applies the policy to
the messages and renders them with the chat template; a prompt that is no longer an
extension of the sampled sequence starts a new segment, so sampling and training see the
same prompts (``rollout.thinking``).
"""

from __future__ import annotations

from agentic_rl.types import Message

__all__ = ["THINK_CLOSE", "THINK_OPEN", "THINKING_POLICIES", "strip_reasoning", "thinking_context"]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
THINKING_POLICIES = ("keep", "strip")


def strip_reasoning(content: str) -> str:
    """``content`` without its reasoning: the text after the last ``</think>``, leading
    whitespace dropped; unchanged when it has no ``</think>``."""
    if THINK_CLOSE not in content:
        return content
    return content.rsplit(THINK_CLOSE, 1)[1].lstrip()


def thinking_context(policy: str, messages: list[Message]) -> list[Message]:
    """The messages the next prompt shows under ``policy`` (``keep``: ``messages`` itself;
    ``strip``: assistant messages with their reasoning removed, new dicts, the others as
    they are)."""
    if policy not in THINKING_POLICIES:
        raise ValueError(f"rollout.thinking: expected one of {', '.join(THINKING_POLICIES)}, got {policy!r}")
    if policy == "keep":
        return messages
    return [
        {**message, "content": strip_reasoning(message["content"])}
        if message.get("role") == "assistant" and THINK_CLOSE in (message.get("content") or "")
        else message
        for message in messages
    ]

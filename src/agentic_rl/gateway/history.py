"""A chat call's history as the episode store keeps it: digests, not messages.

A request's messages are reduced to what its prompt is built from (role, text, tool calls,
tool-call id, tool name) and digested prefix by prefix, so the next call's history can be
recognised (``EpisodeStore.continuation``) without keeping any request's messages, or the
extra keys a client put in them, resident.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentic_rl.gateway.chat import content_text


def _reduced(message: dict[str, Any]) -> dict[str, Any]:
    """What of a (validated: ``chat.to_model_messages``) OpenAI message its rendering reads."""
    role = message["role"]
    calls = [
        [call.get("id", ""), call["function"]["name"], call["function"].get("arguments") or "{}"]
        for call in (message.get("tool_calls") or [] if role == "assistant" else [])
    ]
    return {
        "role": role,
        "text": content_text(message.get("content"), "message"),
        "calls": calls,
        "tool_call_id": (message.get("tool_call_id") or "") if role == "tool" else "",
        "name": (message.get("name") or "") if role == "tool" else "",
    }


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def prefix_digests(messages: list[dict[str, Any]]) -> list[str]:
    """``out[k]``: the digest of ``messages[:k]`` (k = 0 .. len(messages)), each chained on the last."""
    out = [digest("")]
    for message in messages:
        out.append(digest(out[-1] + json.dumps(_reduced(message), sort_keys=True, ensure_ascii=False)))
    return out

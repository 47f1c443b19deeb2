"""Template drift: where the token sequence an episode grew by appending differs from
what the chat template renders for the same messages.

Token-in-token-out appends each observation after the sampled tokens; a template that is
not append-only (DeepSeek-R1 and Qwen3 drop earlier reasoning, Mistral v3 writes a space
before an assistant turn and trims it, a turn ended with a stop token the template does
not write) renders the same conversation differently. The rollout measures the difference
before every appended observation (``template_drift_tokens``) and, where there is one,
starts a new segment from the template's rendering instead of training on a sequence the
model would never be given again.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agentic_rl.types import Message

if TYPE_CHECKING:
    from agentic_rl.chat import ChatRenderer

__all__ = ["decoded_text", "template_drift_mean", "template_drift_tokens"]


def decoded_text(renderer: ChatRenderer, token_ids: list[int]) -> str:
    """The exact text of ``token_ids`` (special tokens kept, no clean-up of spaces)."""
    return renderer.tokenizer.decode(token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def template_drift_tokens(
    renderer: ChatRenderer, token_ids: list[int], messages: list[Message], tools: list[dict] | None = None
) -> int:
    """0 when the text of ``token_ids`` (a prompt grown by appending) is the chat
    template's rendering of ``messages`` with the generation prompt (``tools``: as for
    ``ChatRenderer.prompt_ids``); else the tokens after the point where the two texts
    part, the larger count of the two sides (at least 1). Compared as text: a different
    tokenization of the same text (a sampled special token the template would write as
    text) is not drift, and the sampled ids are trained on as they are."""
    expected = renderer.prompt_text(messages, tools=tools)
    actual = decoded_text(renderer, token_ids)
    if actual == expected:
        return 0
    common = len(os.path.commonprefix([actual, expected]))
    return max(len(renderer.encode_text(actual[common:])), len(renderer.encode_text(expected[common:])), 1)


def template_drift_mean(trajectories: list) -> float:
    """The step metric ``template_drift_tokens``: drift tokens per episode (each episode's
    total, ``info["template_drift_tokens"]``, over its segments), 0.0 for none."""
    if not trajectories:
        return 0.0
    return sum(float(t.info.get("template_drift_tokens", 0)) for t in trajectories) / len(trajectories)

"""The pieces of a completion response: where a stop string cuts a choice, its finish
reason, and its log-probs in the chat and the legacy text form."""

from __future__ import annotations

import math
from typing import Any

from agentic_rl.chat import ChatRenderer
from agentic_rl.engines.base import Completion

Choice = tuple[dict[str, Any], int]
"""A finished choice of a response and the tokens it counts in ``usage``."""


def cut_at_stop(renderer: ChatRenderer, ids: list[int], stops: list[str]) -> tuple[list[int], str, bool]:
    """(ids, text) up to the first stop string (the text without it, the ids up to the token
    that completed it), and whether a stop string was found."""
    text = renderer.response_text(ids)
    hits = [(text.find(s), s) for s in stops if s in text]
    if not hits:
        return ids, text, False
    index, stop = min(hits)
    for k in range(1, len(ids) + 1):  # the shortest prefix whose text reaches the stop string
        if len(renderer.response_text(ids[:k])) >= index + len(stop) and stop in renderer.response_text(ids[:k]):
            return ids[:k], text[:index], True
    return ids, text[:index], True


def finish_reason(completion: Completion, stopped_by_string: bool) -> str:
    return "length" if completion.finish_reason == "length" and not stopped_by_string else "stop"


LOWEST_LOGPROB = -9999.0
"""What a log-prob of -inf (a token a very low temperature rules out) is reported as: JSON
has no infinity, and vLLM's OpenAI server answers the same."""


def finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else LOWEST_LOGPROB


def token_logprob(tokenizer, token: int, logprob: float, alternatives: list[tuple[int, float]]) -> dict[str, Any]:
    """One entry of a chat choice's ``logprobs.content``."""

    def entry(token_id: int, value: float) -> dict[str, Any]:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": finite(value), "bytes": list(text.encode("utf-8"))}

    return {**entry(token, logprob), "top_logprobs": [entry(t, v) for t, v in alternatives]}


def text_logprobs(
    tokenizer, ids: list[int], logprobs: list[float], top: list[list[tuple[int, float]]] | None
) -> dict[str, Any]:
    """A text choice's legacy ``logprobs`` object: each token's text, its log-prob, the most
    likely alternatives by text (with the sampled token, as OpenAI gives k + 1 at most) and
    its offset in the completion text (the sum of the earlier tokens' texts)."""
    tokens = [tokenizer.decode([t]) for t in ids]
    offsets, position = [], 0
    for piece in tokens:
        offsets.append(position)
        position += len(piece)
    top_logprobs = []
    for i, (piece, value) in enumerate(zip(tokens, logprobs)):
        entry = {tokenizer.decode([t]): finite(v) for t, v in (top[i] if top else [])}
        entry.setdefault(piece, finite(value))
        top_logprobs.append(entry)
    values = [finite(value) for value in logprobs]
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": top_logprobs, "text_offset": offsets}

"""What a backend takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None
    return_entropy: bool = False
    """Also return each sampled position's predictive entropy (nats, at the sampling
    temperature, before top-p): ARPO's branching signal."""
    row_seeds: list[int] | None = None
    """One random stream per prompt (backends that support it; overrides ``seed``): a
    token's draw then depends only on its stream and position, not on the batch."""


@dataclass
class Completion:
    """One sampled continuation: token ids as sampled, each token's sampler log-prob
    (log-softmax of the logits at the sampling temperature, before top-p), and why it
    stopped ("stop": a stop token, which is included in ``token_ids``; "length")."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]
    entropies: list[float] | None = None
    """Per-token entropy of the sampling distribution, when ``SamplingParams.return_entropy``."""


class TokenBackend(Protocol):
    """A token-level backend: prompts are token ids, completions are token ids."""

    kind: Literal["tokens"]

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, *, stop_token_ids: list[int], max_new_tokens: list[int] | None = None) -> list[Completion]: ...

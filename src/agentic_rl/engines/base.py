"""The Backend contract every inference engine implements (DESIGN.md, "Contracts").

A backend speaks one of two interfaces:

- ``"tokens"``: ``generate(prompt_token_ids_batch, sampling, *, stop_token_ids, max_new_tokens)``
  returns one :class:`Completion` per prompt with the token ids exactly as sampled and their
  sampler log-probs (training needs this: in-process HF, scripted fakes, vLLM);
- ``"chat"``: ``chat(conversations, ...)`` takes messages and returns text (remote
  OpenAI-compatible endpoints; evaluation only, no token-level data).

Both carry a ``weight_version`` (the number of weight updates the engine has seen, stamped
on every completion so each trajectory records which weights sampled it), take
``sync_weights(source)`` after each optimizer step, and are released with ``close()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable


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
    top_logprobs: int = 0
    """Also return, per sampled position, the this-many most likely tokens and their
    log-probs (``Completion.top_logprobs``; engines with ``supports_top_logprobs``). 0: off,
    and sampling does no extra work."""
    stream_tokens: bool = False
    """The caller reads a turn's tokens while it is sampled (a decode session's ``sampled``)
    and may cancel it: server engines that can stream (vLLM) then stream their responses,
    and a cancel ends the request on the server. The in-process engine always shows them."""

    def seeds_for(self, count: int) -> list[int]:
        """The stream of each of ``count`` prompts: ``row_seeds`` if given, else one derived
        from ``(seed, i)`` (a fresh ``seed`` from torch's generator when None)."""
        if self.row_seeds is not None:
            return list(self.row_seeds)
        import torch

        from agentic_rl.seeds import stream_seed

        base = self.seed if self.seed is not None else int(torch.randint(0, 2**62, ()))
        return [stream_seed(base, i) for i in range(count)]


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
    weight_version: int = 0
    """The engine's ``weight_version`` that sampled the first token."""
    version_changes: list[tuple[int, int]] | None = None
    """Partial rollouts: ``(offset, version)`` where new weights took over mid-completion
    (tokens from ``offset`` on were sampled by ``version``); None or empty: one version."""
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """Per sampled token, the ``SamplingParams.top_logprobs`` most likely tokens ``(id,
    log-prob)``, most likely first, from the distribution ``logprobs`` are taken from: the
    first entry's log-prob is at least the sampled token's (equal when it is that token)."""
    error: str | None = None
    """Set when the engine failed to sample (a remote server died, a request timed out):
    the episode ends as an infrastructure error (masked from the loss, counted)."""


@runtime_checkable
class Backend(Protocol):
    """What every engine offers, whatever its interface."""

    interface: Literal["tokens", "chat"]
    weight_version: int

    def sync_weights(self, source: Any = None) -> int:
        """Make the engine sample from the trainer's newest weights; returns the new version."""
        ...

    def close(self) -> None:
        """Release the engine's resources (threads, connections, caches)."""
        ...


class TokenBackend(Backend, Protocol):
    """A token-level backend: prompts are token ids, completions are token ids."""

    interface: Literal["tokens"]

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        *,
        stop_token_ids: list[int],
        max_new_tokens: list[int] | None = None,
    ) -> list[Completion]: ...


class SharedWeights:
    """``weight_version`` bookkeeping for engines that read the trainer's own model object
    (in-process HF, scripted fakes): new weights are already visible, so ``sync_weights``
    only counts the update."""

    weight_version: int = 0

    def sync_weights(self, source: Any = None) -> int:
        self.weight_version += 1
        return self.weight_version

    def close(self) -> None:
        return None

"""What a decode session's sequences sample, from logits to finished turns.

:class:`TurnSampler` draws one token per row from a batch of logits with the session's
sampling settings (seeded per row and position), and keeps each token, its log-prob and,
when asked, its entropy and most likely alternatives in device buffers indexed by the
sequence's handle, so a decode step does no per-row Python. A row's turn ends at a stop
token or its budget; only then are its buffers converted, once, into a
:class:`~agentic_rl.engines.base.Completion`. The session (engines/decode_session.py)
owns the slots and the forward passes; this module owns the sampled outputs.
"""

from __future__ import annotations

import torch

from agentic_rl.engines.base import Completion, SamplingParams
from agentic_rl.engines.sampling import entropy as sampling_entropy
from agentic_rl.engines.sampling import sample
from agentic_rl.engines.sampling import top_logprobs as sampling_top_logprobs


class TurnSampler:
    """Sampling with fixed ``sampling`` settings and the sampled turns of every handle.

    ``stops``: the stop token ids as a tensor on ``device``. The buffers (``tokens``,
    ``logprobs``, ``entropy``; ``top_ids`` / ``top_logprobs`` only when alternatives are
    asked for; ``count`` and ``budget`` per handle) exist after the first ``reserve``.
    """

    def __init__(self, sampling: SamplingParams, stops: torch.Tensor, device: torch.device) -> None:
        self.sampling = sampling
        self.stops = stops
        self.device = device
        self.tokens: torch.Tensor | None = None
        self.logprobs: torch.Tensor | None = None
        self.entropy: torch.Tensor | None = None
        self.top_ids: torch.Tensor | None = None
        self.top_logprobs: torch.Tensor | None = None
        self.count: torch.Tensor | None = None
        """Tokens sampled so far in each handle's current turn."""
        self.budget: torch.Tensor | None = None
        """The most tokens each handle's current turn may sample."""
        self.width = 0
        """Columns of the buffers: the longest turn they can hold."""
        self.top_width = 0
        """Alternatives kept per token: k, or the vocabulary when that is smaller."""

    def reserve(self, handles: int, width: int) -> None:
        """Room for ``handles`` rows of ``width`` tokens; what the buffers hold is kept."""
        if self.tokens is not None and self.tokens.shape[0] >= handles and self.width >= width:
            return
        rows = max(handles, 2 * (0 if self.tokens is None else self.tokens.shape[0]))
        cols = max(width, self.width)
        grown = {
            "tokens": torch.zeros((rows, cols), dtype=torch.long, device=self.device),
            "logprobs": torch.zeros((rows, cols), dtype=torch.float32, device=self.device),
            "entropy": torch.zeros((rows, cols), dtype=torch.float32, device=self.device),
        }
        k = self.sampling.top_logprobs
        if k > 0:  # only sessions that were asked for alternatives hold them
            grown["top_ids"] = torch.zeros((rows, cols, k), dtype=torch.long, device=self.device)
            grown["top_logprobs"] = torch.zeros((rows, cols, k), dtype=torch.float32, device=self.device)
        for name, tensor in grown.items():
            old = getattr(self, name)
            if old is not None:
                tensor[: old.shape[0], : old.shape[1], ...] = old
            setattr(self, name, tensor)
        counts = torch.zeros(rows, dtype=torch.long, device=self.device)
        budgets = torch.zeros(rows, dtype=torch.long, device=self.device)
        if self.count is not None:
            counts[: self.count.shape[0]] = self.count
            budgets[: self.budget.shape[0]] = self.budget
        self.count, self.budget = counts, budgets
        self.width = cols

    def start(self, handle: int, budget: int) -> None:
        """A new turn for ``handle``: nothing sampled yet, at most ``budget`` tokens."""
        self.count[handle] = 0
        self.budget[handle] = budget

    def produced(self, handle: int) -> int:
        """Tokens sampled so far in ``handle``'s current turn."""
        return int(self.count[handle])

    def sampled(self, handle: int) -> list[int]:
        """The tokens sampled so far in ``handle``'s current turn ([] before any storage)."""
        if self.tokens is None:
            return []
        return self.tokens[handle, : int(self.count[handle])].tolist()

    def sample(
        self, logits: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor, handles: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw row i's token from ``logits[i]`` (stream ``seeds[i]``, position
        ``positions[i]``) and store it as the next token of ``handles[i]``'s turn; return
        the tokens and which rows finished their turn."""
        tokens, logprobs = sample(
            logits, temperature=self.sampling.temperature, top_p=self.sampling.top_p, seeds=seeds, positions=positions
        )
        entropies = sampling_entropy(logits, self.sampling.temperature) if self.sampling.return_entropy else None
        alternatives = (
            sampling_top_logprobs(logits, temperature=self.sampling.temperature, k=self.sampling.top_logprobs)
            if self.sampling.top_logprobs > 0
            else None
        )
        return tokens, self._record(handles, tokens, logprobs, entropies, alternatives)

    def _record(
        self,
        handles: torch.Tensor,
        tokens: torch.Tensor,
        logprobs: torch.Tensor,
        entropies: torch.Tensor | None,
        alternatives=None,
    ) -> torch.Tensor:
        """Store one sampled token per row; return which rows finished their turn."""
        column = self.count[handles]
        self.tokens[handles, column] = tokens
        self.logprobs[handles, column] = logprobs
        if entropies is not None:
            self.entropy[handles, column] = entropies
        if alternatives is not None:
            ids, values = alternatives
            self.top_width = ids.shape[1]  # k, or the vocabulary when that is smaller
            self.top_ids[handles, column, : ids.shape[1]] = ids
            self.top_logprobs[handles, column, : ids.shape[1]] = values
        self.count[handles] = column + 1
        return torch.isin(tokens, self.stops) | (column + 1 >= self.budget[handles])

    def completion(self, handle: int, *, weight_version: int, version_changes: list[tuple[int, int]]) -> Completion:
        """``handle``'s finished turn as a Completion stamped with ``weight_version`` and
        the ``(offset, new version)`` of each weight swap during the turn."""
        n = int(self.count[handle])
        tokens = self.tokens[handle, :n].tolist()
        stopped = bool(torch.isin(self.tokens[handle, n - 1], self.stops))
        entropies = self.entropy[handle, :n].tolist() if self.sampling.return_entropy else None
        alternatives = None
        if self.sampling.top_logprobs > 0:
            k = self.top_width
            ids, values = self.top_ids[handle, :n, :k].tolist(), self.top_logprobs[handle, :n, :k].tolist()
            alternatives = [list(zip(row_ids, row_values)) for row_ids, row_values in zip(ids, values)]
        return Completion(
            token_ids=tokens,
            logprobs=self.logprobs[handle, :n].tolist(),
            finish_reason="stop" if stopped else "length",
            entropies=entropies,
            weight_version=weight_version,
            version_changes=version_changes,
            top_logprobs=alternatives,
        )

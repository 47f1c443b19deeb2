"""The in-process transformers backend. It shares the trainer's model object (no copy),
so a training step's new weights are seen by the next ``generate`` automatically.

Decoding runs in a ``DecodeSession`` (engines/decode_session.py): a preallocated slot KV cache,
sampling on the device, rows leaving the batch as they finish. ``generate`` is the plain
Backend contract; ``session`` is the richer API the rollout engine uses for continuous
batching and KV reuse across the turns of a trajectory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from agentic_rl.engines.base import Completion, SamplingParams, SharedWeights
from agentic_rl.engines.decode_session import DecodeSession
from agentic_rl.engines.staged import StagedWeights
from agentic_rl.models.copies import frozen_copy
from agentic_rl.models.lora import select_adapter


class HFBackend(SharedWeights):
    """The in-process engine (Backend contract, ``interface == "tokens"``).

    ``weights_dtype``: sample from a copy of the trainer's weights in this dtype (e.g.
    bf16 rollouts of a float32 master); ``own_copy``: a copy even in the same dtype (a
    sharded trainer's parameters cannot decode). ``sync_weights`` refreshes the copy in
    place after each optimizer step. By default (None, or the model's own dtype) the
    engine reads the trainer's model itself."""

    interface = "tokens"
    supports_top_logprobs = True
    """Completions carry the most likely alternatives per token when ``SamplingParams.top_logprobs`` asks."""

    min_shared_prefix = 8
    """Shared prompt prefixes at least this long (e.g. a system prompt) are encoded once per
    batch, where that spares enough work (engines/decode_session.py)."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        batch_size: int = 64,
        weights_dtype: torch.dtype | None = None,
        own_copy: bool = False,
    ) -> None:
        self.trainer_model = model
        own_dtype = next(model.parameters()).dtype
        separate = own_copy or weights_dtype not in (None, own_dtype)
        self.model = frozen_copy(model, dtype=weights_dtype) if separate else model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.staged = StagedWeights(self._load_version)
        """Weights another thread handed over (``stage_weights``), applied between decode steps."""
        self.adapter_for: Callable[[str | None], str] | None = None
        """``lora.roles`` with an env's roles: a role -> the LoRA adapter that samples its turns
        (the schedulers route each episode's turn by its role); None: one policy for all."""

    @property
    def separate_weights(self) -> bool:
        """Whether the engine samples from its own copy of the weights (whose numbers differ
        from the trainer's: rollout correction applies)."""
        return self.model is not self.trainer_model

    @property
    def policy_logprobs(self) -> bool:
        """Whether the log-probs it records are the trainer's policy's own (it samples with
        the trainer's weights): a trainer may reuse them as its pre-update log-probs."""
        return not self.separate_weights

    @property
    def weights_dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def sync_weights(self, source: Any = None) -> int:
        """Copy the trainer's weights (``source``: a model, or full tensors by parameter name
        as a sharded trainer gathers them; default the model given at construction) into
        the engine's copy, in place (no new allocation); count the update."""
        if self.separate_weights:
            self._copy_weights(source if source is not None else self.trainer_model)
        return super().sync_weights(source)

    def stage_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        """Thread-safe: the engine samples from ``weights`` (full tensors by parameter name) as
        ``version`` from its next decode step on; sequences mid-turn continue with them
        (engines/staged.py). ``apply_staged`` loads them at once when nothing decodes."""
        self.staged.stage(weights, version)

    def apply_staged(self) -> int | None:
        """Load staged weights now (between rollouts); returns their version or None."""
        return self.staged.apply()

    def _load_version(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        self._copy_weights(weights)
        self.weight_version = version

    def _copy_weights(self, source) -> None:
        """Copy ``source`` (a model, or full tensors by parameter name) into the engine's
        model, in place (no new allocation)."""
        with torch.no_grad():
            if isinstance(source, Mapping):
                for name, target in self.model.named_parameters():
                    target.copy_(source[name])
            else:
                for target, value in zip(self.model.parameters(), source.parameters(), strict=True):
                    target.copy_(value)

    def select_adapter(self, name: str) -> None:
        """Sample with LoRA adapter ``name`` of the engine's (peft) model from now on (a role's policy)."""
        select_adapter(self.model, name)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def session(self, sampling: SamplingParams, *, stop_token_ids: Sequence[int]) -> DecodeSession:
        """A continuous-batching session holding at most ``batch_size`` sequences at once."""
        return DecodeSession(
            self.model,
            sampling=sampling,
            stop_token_ids=stop_token_ids,
            max_slots=self.batch_size,
            pad_token_id=self.pad_token_id,
            min_shared_prefix=self.min_shared_prefix,
            weight_version=self.weight_version,
            staged=self.staged,
        )

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        *,
        stop_token_ids: list[int],
        max_new_tokens: list[int] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, in input order. Row i draws from stream
        ``sampling.row_seeds[i]`` if given, else one derived from ``(sampling.seed, i)``."""
        limits = max_new_tokens or [sampling.max_new_tokens] * len(prompts)
        seeds = sampling.seeds_for(len(prompts))
        results: list[Completion | None] = [None] * len(prompts)
        with self.session(sampling, stop_token_ids=stop_token_ids) as session:
            for i, prompt in enumerate(prompts):
                session.submit(i, prompt, limits[i], seeds[i])
            while session.busy:
                for i, completion in session.step():
                    results[i] = completion
                    session.release(i)  # its slot takes the next prompt
        return results  # type: ignore[return-value]

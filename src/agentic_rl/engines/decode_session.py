"""A continuous-batching decode session over a preallocated KV cache.

Sequences are submitted with a key; each ``step()`` first starts waiting work (new
prompts, or paused sequences extended with observation tokens) in one batched prefill,
then advances every running sequence by one token. A sequence that finishes a turn
keeps its slot and cache (paused) so that, when its tool answers, only the observation
tokens are encoded; the others never wait for it. Freed slots take new work.

Running sequences always occupy slots ``[0, running)`` of the cache, so a decode step is
one forward pass over a view (no gather, no concatenation); slots are swapped when a
sequence starts or stops running. Per token there is no per-row Python: tokens, log-probs
and entropies go into device buffers and are converted once per finished turn
(engines/turn_sampler.py). Which waiting sequences start, and which prompt tokens are
shared, is decided in engines/session_sequences.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Sequence

import torch

from agentic_rl.accel import decoder_for, packed_weights
from agentic_rl.anatomy import cache_argument, split_model
from agentic_rl.engines.base import Completion, SamplingParams
from agentic_rl.engines.kv_cache import SlotCache
from agentic_rl.engines.session_sequences import DecodeSequence, admit, shared_prefix_length, split_identical
from agentic_rl.engines.staged import StagedWeights
from agentic_rl.engines.turn_sampler import TurnSampler


class DecodeSession:
    """One batch of work for ``model`` (a transformers causal LM) with fixed sampling settings.

    ``max_slots`` bounds the sequences held at once (running or paused); more wait for a
    free slot. ``min_shared_prefix``: new prompts sharing at least this many leading tokens
    encode them once, when that spares at least ``SHARED_PREFIX_MIN_SAVED`` token encodings
    (engines/session_sequences.py; identical prompts, e.g. a GRPO group, are encoded once whole).

    Used as a context manager (``with backend.session(...) as session``), the model's
    oneDNN linear weights stay packed for the session (accel/onednn.py) and supported
    Llama-family models run the lean forward (accel/lean.py): faster decode steps; the
    weights must not change until the block ends.
    """

    def __init__(
        self,
        model,
        *,
        sampling: SamplingParams,
        stop_token_ids: Sequence[int],
        max_slots: int,
        pad_token_id: int,
        min_shared_prefix: int = 8,
        weight_version: int = 0,
        staged: StagedWeights | None = None,
    ) -> None:
        self.model = model
        self.weight_version = weight_version
        self.staged = staged
        """New weights another thread staged: applied at the start of the next ``step()``."""
        self._entered = False
        self.backbone, self.lm_head = split_model(model)
        self._cache_name = next(iter(cache_argument(self.backbone, None)))  # resolved once, not per step
        self.sampling = sampling
        self.max_slots = max_slots
        self.pad_token_id = pad_token_id
        self.min_shared_prefix = min_shared_prefix
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        self.stops = torch.tensor(sorted(set(stop_token_ids)) or [-1], device=self.device)
        self.outputs = TurnSampler(sampling, self.stops, self.device)
        """Each handle's sampled turn, in device buffers (engines/turn_sampler.py)."""
        self.cache: SlotCache | None = None
        self._lean = None
        self.owner: list[DecodeSequence | None] = []
        self.running = 0
        self.waiting: list[DecodeSequence] = []
        self.sequences: dict[Hashable, DecodeSequence] = {}
        self.free_handles: list[int] = []
        self._handles = 0

    # ------------------------------------------------------------------ public API

    def __enter__(self) -> DecodeSession:
        self._scope = contextlib.ExitStack()
        self._scope.enter_context(packed_weights(self.model))
        self._lean = decoder_for(self.model)
        self._entered = True
        return self

    def __exit__(self, *exc_info) -> None:
        self._lean = None
        self._entered = False
        self._scope.close()

    @property
    def busy(self) -> bool:
        """Whether ``step()`` has anything to do."""
        return bool(self.running or self.waiting)

    def submit(self, key: Hashable, token_ids: Sequence[int], max_new_tokens: int, seed: int) -> None:
        """A new sequence: encode ``token_ids``, then sample up to ``max_new_tokens`` tokens.
        ``seed`` picks its random stream (the draw for position p depends on (seed, p) only)."""
        if key in self.sequences:
            raise ValueError(f"sequence {key!r} is already in this session")
        if not token_ids:
            raise ValueError(f"sequence {key!r}: token_ids is empty; a prompt needs at least one token")
        sequence = DecodeSequence(
            key, int(seed), self._new_handle(), pending=list(token_ids), budget=max(int(max_new_tokens), 1)
        )
        self.sequences[key] = sequence
        self.waiting.append(sequence)

    def extend(self, key: Hashable, token_ids: Sequence[int], max_new_tokens: int) -> None:
        """Resume a paused sequence: append ``token_ids`` (an observation) to its cache and
        sample up to ``max_new_tokens`` more. Nothing before them is encoded again."""
        sequence = self.sequences[key]
        if sequence.last_token is None or sequence in self.waiting:
            raise ValueError(f"sequence {key!r} is not paused after a finished turn")
        sequence.pending = [sequence.last_token, *token_ids]
        sequence.last_token = None
        sequence.budget = max(int(max_new_tokens), 1)
        self.waiting.append(sequence)

    def release(self, key: Hashable) -> None:
        """Forget a sequence (its episode ended); its slot takes new work."""
        sequence = self.sequences.pop(key)
        if sequence in self.waiting:
            self.waiting.remove(sequence)
        if sequence.slot is not None:
            if sequence.slot < self.running:
                raise ValueError(f"sequence {key!r} is still running")
            self.owner[sequence.slot] = None
        self.free_handles.append(sequence.handle)

    def cancel(self, key: Hashable) -> None:
        """Stop a sequence wherever it is (mid-turn included: its client went away) and free
        its slot; unknown keys are ignored."""
        sequence = self.sequences.get(key)
        if sequence is None:
            return
        if sequence.slot is not None and sequence.slot < self.running:
            self._sync_running()
            self._move(sequence, self.running - 1)  # the running range stays contiguous
            self.running -= 1
            self._rebuild_running()
        self.release(key)

    def sampled(self, key: Hashable) -> list[int]:
        """The tokens sampled so far in the sequence's current turn (streaming)."""
        sequence = self.sequences[key]
        if sequence in self.waiting:
            return []
        return self.outputs.sampled(sequence.handle)

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, Completion]]:
        """Start waiting work, advance running sequences by one token; return finished turns."""
        if self.staged is not None and self.staged.pending:
            self._swap_weights()
        was_training = self.model.training
        self.model.eval()
        try:
            finished: list[tuple[Hashable, Completion]] = []
            if self.waiting:
                self._start_waiting(finished)
            if self.running:
                self._decode(finished)
            return finished
        finally:
            self.model.train(was_training)

    def _swap_weights(self) -> None:
        """Load the staged weights between two decode steps (packed copies are rebuilt):
        running sequences continue with them, and their turns record the offset."""
        entered = self._entered
        if entered:
            self.__exit__(None, None, None)
        version = self.staged.apply()
        if entered:
            self.__enter__()
        if version is None or version == self.weight_version:
            return
        for sequence in self.owner[: self.running]:
            offset = self.outputs.produced(sequence.handle)
            if offset > 0:  # mid-turn; a turn not yet sampling is all new weights
                sequence.version_changes.append((offset, self.weight_version, version))
        self.weight_version = version

    # ------------------------------------------------------------------ slots and buffers

    def _new_handle(self) -> int:
        if self.free_handles:
            return self.free_handles.pop()
        self._handles += 1
        return self._handles - 1

    def _ensure_storage(self, slots: int, capacity: int, width: int) -> None:
        if self.cache is None:
            dtype = getattr(self._lean, "cache_dtype", self.dtype)  # the lean forward's: float32 for bf16 weights
            self.cache = SlotCache(
                self.backbone.config, slots=slots, capacity=capacity, dtype=dtype, device=self.device
            )
        else:
            self.cache.reserve(slots, capacity)
        self.owner.extend([None] * (self.cache.slots - len(self.owner)))
        self.outputs.reserve(max(self._handles, 1), width)

    def _move(self, sequence: DecodeSequence, target: int) -> None:
        """Put ``sequence`` in slot ``target``, swapping with whatever is there."""
        source = sequence.slot
        other = self.owner[target]
        if source == target:
            return
        if source is None:
            if other is not None:
                raise RuntimeError("target slot is taken")  # callers pick free targets for slotless sequences
        elif other is None:
            self.cache.copy_slot(source, target, sequence.length)
            self.owner[source] = None
        else:
            self.cache.swap_slots(source, target, max(sequence.length, other.length))
            self.owner[source] = other
            other.slot = source
        self.owner[target] = sequence
        sequence.slot = target

    def _sync_running(self) -> None:
        """Write the running rows' lengths and last tokens back to their sequences."""
        if self.running:
            for sequence, length, token in zip(
                self.owner[: self.running], self.run_length.tolist(), self.run_last.tolist()
            ):
                sequence.length, sequence.last_token = length, token

    def _rebuild_running(self) -> None:
        rows = self.owner[: self.running]
        self.run_length = torch.tensor([s.length for s in rows], dtype=torch.long, device=self.device)
        self.run_last = torch.tensor([s.last_token for s in rows], dtype=torch.long, device=self.device)
        self.run_seed = torch.tensor([s.seed for s in rows], dtype=torch.long, device=self.device)
        self.run_handle = torch.tensor([s.handle for s in rows], dtype=torch.long, device=self.device)

    # ------------------------------------------------------------------ forward passes

    def _forward(self, lo: int, hi: int, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Encode ``input_ids`` [B, q] for slots [lo, hi) whose caches hold ``lengths`` [B]
        tokens; return the last hidden states [B, q, hidden]."""
        q = input_ids.shape[1]
        positions = lengths[:, None] + torch.arange(q, device=self.device)
        width = int(lengths.max()) + q
        # Right padding writes every row up to its length + q: the longest cache plus another
        # row's longest pending can pass what any one row reserved, and a position past the
        # capacity would land in the next head's cache (or fail the attention's shapes).
        self.cache.reserve(self.cache.slots, width)
        # Query j of a row sees its cached tokens and its own new tokens up to j.
        mask = (torch.arange(width, device=self.device)[None, None, :] <= positions[:, :, None])[:, None]
        self.cache.bind(lo, hi, positions, width)
        if self._lean is not None:
            return self._lean.forward(input_ids, positions, mask, self.cache)
        return self.backbone(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_name: self.cache},
        ).last_hidden_state

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._lean is not None:
            logits = self._lean.logits(hidden)
            if logits is not None:
                return logits
        return self.lm_head(hidden).float()

    def _completion(self, sequence: DecodeSequence) -> Completion:
        changes, sequence.version_changes = sequence.version_changes, []
        return self.outputs.completion(
            sequence.handle,
            weight_version=changes[0][1] if changes else self.weight_version,
            version_changes=[(offset, new) for offset, _, new in changes],
        )

    def _start_waiting(self, finished: list) -> None:
        """Admit waiting sequences that have (or can get) a slot, encode their pending
        tokens in one batched pass, and sample each one's first token."""
        self._sync_running()
        admitted, held = admit(self.waiting, sum(1 for s in self.owner if s is not None), self.max_slots)
        for sequence in admitted:
            self.waiting.remove(sequence)
        if not admitted:
            return
        slots_needed = max(held, self.running + len(admitted))
        capacity = max(s.length + len(s.pending) + s.budget for s in admitted)
        self._ensure_storage(slots_needed, capacity, max(s.budget for s in admitted))
        for sequence in admitted:
            self.outputs.start(sequence.handle, sequence.budget)
        # Identical new prompts (a GRPO group) are encoded once: representatives first.
        leaders, copies = split_identical(admitted)
        ordered = leaders + [s for s, _ in copies]
        # Slotless sequences need free slots outside the target range, so place slot holders first.
        lo = self.running
        for index, sequence in enumerate(ordered):
            if sequence.slot is not None:
                self._move(sequence, lo + index)
        for index, sequence in enumerate(ordered):
            if sequence.slot is None:
                target = lo + index
                if self.owner[target] is not None:
                    self._move(self.owner[target], self.owner.index(None))
                self._move(sequence, target)
        self._shared_prefix(leaders, lo)
        hidden_last = self._encode_pending(leaders, lo)
        for sequence, leader in copies:
            self.cache.copy_slot(leader.slot, sequence.slot, leader.length)
            sequence.length, sequence.pending = leader.length, []
        logits = self._logits(hidden_last)
        source = {id(s): i for i, s in enumerate(leaders)}
        rows = torch.tensor(
            [source[id(s)] for s in leaders] + [source[id(leader)] for _, leader in copies], device=self.device
        )
        logits = logits[rows]
        seeds = torch.tensor([s.seed for s in ordered], dtype=torch.long, device=self.device)
        positions = torch.tensor([s.length for s in ordered], dtype=torch.long, device=self.device)
        handles = torch.tensor([s.handle for s in ordered], dtype=torch.long, device=self.device)
        tokens, done = self.outputs.sample(logits, seeds, positions, handles)
        done = done.tolist()
        for sequence, token in zip(ordered, tokens.tolist()):
            sequence.last_token = token
        # Those still going join the running range; the others pause right away.
        going = [s for s, d in zip(ordered, done) if not d]
        for index, sequence in enumerate(going):
            self._move(sequence, lo + index)
        self.running = lo + len(going)
        for sequence, d in zip(ordered, done):
            if d:
                finished.append((sequence.key, self._completion(sequence)))
        self._rebuild_running()

    def _shared_prefix(self, leaders: list[DecodeSequence], lo: int) -> None:
        """Encode the leading tokens that all new prompts share once, then copy that cache."""
        fresh = [s for s in leaders if s.length == 0]
        end = shared_prefix_length(fresh, self.min_shared_prefix)
        if end == 0:
            return
        first = fresh[0]
        self._forward(
            first.slot,
            first.slot + 1,
            torch.tensor([first.pending[:end]], device=self.device),
            torch.zeros(1, dtype=torch.long, device=self.device),
        )
        for sequence in fresh:
            if sequence is not first:
                self.cache.copy_slot(first.slot, sequence.slot, end)
            sequence.length, sequence.pending = end, sequence.pending[end:]

    def _encode_pending(self, leaders: list[DecodeSequence], lo: int) -> torch.Tensor:
        """One right-padded pass over the leaders' pending tokens; [len(leaders), hidden] at each row's last token."""
        width = max(len(s.pending) for s in leaders)
        input_ids = torch.full((len(leaders), width), self.pad_token_id, dtype=torch.long)
        for row, sequence in enumerate(leaders):
            input_ids[row, : len(sequence.pending)] = torch.tensor(sequence.pending)
        lengths = torch.tensor([s.length for s in leaders], dtype=torch.long, device=self.device)
        hidden = self._forward(lo, lo + len(leaders), input_ids.to(self.device), lengths)
        last = torch.tensor([len(s.pending) - 1 for s in leaders], device=self.device)
        for sequence in leaders:
            sequence.length += len(sequence.pending)
            sequence.pending = []
        return hidden[torch.arange(len(leaders), device=self.device), last]

    def _decode(self, finished: list) -> None:
        """Advance every running sequence by one token."""
        n = self.running
        hidden = self._forward(0, n, self.run_last[:, None], self.run_length)[:, -1]
        self.run_length += 1
        tokens, done = self.outputs.sample(self._logits(hidden), self.run_seed, self.run_length, self.run_handle)
        self.run_last = tokens
        if not bool(done.any()):
            return
        self._sync_running()
        leaving = [self.owner[i] for i in done.nonzero().flatten().tolist()]
        for sequence in leaving:
            # Swap it with the last running row: the running range stays contiguous.
            self._move(sequence, self.running - 1)
            self.running -= 1
            finished.append((sequence.key, self._completion(sequence)))
        self._rebuild_running()

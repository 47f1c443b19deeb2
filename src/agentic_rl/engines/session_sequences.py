"""A decode session's sequences and the decisions taken about them before a prefill.

:class:`DecodeSequence` is one sequence's state in a session (its handle, the tokens it
still has to encode, its cache length and slot). The functions here are pure choices
over such sequences that the session (engines/decode_session.py) then carries out on its
cache: which waiting sequences start now (:func:`admit`), which new prompts are identical
and so encoded once (:func:`split_identical`), and how many leading tokens all new
prompts share and are worth encoding once on their own (:func:`shared_prefix_length`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

SHARED_PREFIX_MIN_SAVED = 64
"""Token encodings a shared prefix must spare to be encoded on its own: that extra pass
reads every weight once, which costs about as much as prefilling ~40 token rows of a
135M model on CPU."""


@dataclass
class DecodeSequence:
    key: Hashable
    seed: int
    handle: int
    """Row of the output buffers, fixed while the sequence lives (slots move, handles do not)."""
    pending: list[int] = field(default_factory=list)
    """Tokens to encode before the next sample (prompt, or last sampled token + observation)."""
    budget: int = 0
    length: int = 0
    """Tokens already in the cache."""
    slot: int | None = None
    last_token: int | None = None
    """The last sampled token: not yet encoded, it leads the next extension."""
    version_changes: list[tuple[int, int, int]] = field(default_factory=list)
    """(offset in the current turn, old version, new version) of each weight swap mid-turn."""


def admit(waiting: Sequence[DecodeSequence], held: int, max_slots: int) -> tuple[list[DecodeSequence], int]:
    """The waiting sequences that start now, in order: those holding a slot, and slotless
    ones while fewer than ``max_slots`` slots are held (``held`` now); and the slots held
    once they have started."""
    admitted: list[DecodeSequence] = []
    for sequence in waiting:
        if sequence.slot is None:
            if held >= max_slots:
                continue
            held += 1
        admitted.append(sequence)
    return admitted, held


def split_identical(
    admitted: Sequence[DecodeSequence],
) -> tuple[list[DecodeSequence], list[tuple[DecodeSequence, DecodeSequence]]]:
    """(leaders, copies): a new prompt identical to an earlier one (a GRPO group) is a
    copy ``(sequence, leader)`` of the first, whose encoding it takes; every other
    sequence leads, in order."""
    representative: dict[tuple[int, ...], DecodeSequence] = {}
    copies: list[tuple[DecodeSequence, DecodeSequence]] = []
    for sequence in admitted:
        if sequence.length == 0:
            leader = representative.setdefault(tuple(sequence.pending), sequence)
            if leader is not sequence:
                copies.append((sequence, leader))
    copied = {id(s) for s, _ in copies}
    return [s for s in admitted if id(s) not in copied], copies


def shared_prefix_length(fresh: Sequence[DecodeSequence], min_shared_prefix: int) -> int:
    """Leading pending tokens that all ``fresh`` prompts share (each keeps at least one
    of its own), when they are at least ``min_shared_prefix`` and encoding them once
    spares at least ``SHARED_PREFIX_MIN_SAVED`` token encodings; else 0."""
    if len(fresh) < 2:
        return 0
    shortest = min((s.pending for s in fresh), key=len)
    end = 0
    while end < len(shortest) - 1 and all(s.pending[end] == shortest[end] for s in fresh):
        end += 1
    if end < min_shared_prefix or (len(fresh) - 1) * end < SHARED_PREFIX_MIN_SAVED:
        return 0
    return end

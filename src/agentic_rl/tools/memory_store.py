"""The memory tools' note stores: one bounded :class:`MemoryStore`, and the process-wide shared ones.

A :class:`MemoryStore` holds notes by key with caps on the number of notes, the total
characters and the size of one note; when a write would pass a cap, notes are forgotten
by the eviction policy (``lru``: the note used longest ago, ``fifo``: the note written
longest ago). Searches rank notes with the library's BM25 (:mod:`agentic_rl.retrieval.bm25`),
re-indexed only after a change. Every method is thread-safe: episodes run concurrently
in threads, and a shared store is written by all of them. :func:`shared_store` keeps the
stores that outlive one episode (and :func:`shared_stores_state` / :func:`load_shared_stores`
carry them through a checkpoint). Kept apart from the tools (:mod:`agentic_rl.tools.memory`)
because a store is plain data with no notion of a tool, an episode or a config.
"""

from __future__ import annotations

import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentic_rl.retrieval.base import Document
from agentic_rl.retrieval.bm25 import BM25Retriever, tokenize

__all__ = [
    "EVICTION_POLICIES",
    "MemoryStore",
    "WriteOutcome",
    "load_shared_stores",
    "shared_store",
    "shared_stores_state",
]

EVICTION_POLICIES = ("lru", "fifo")


@dataclass(frozen=True)
class WriteOutcome:
    """What one accepted write did."""

    key: str
    replaced: bool
    evicted: tuple[str, ...]
    notes: int


class MemoryStore:
    """Notes by key, bounded: at most ``max_notes`` notes and ``max_chars`` characters of
    note text in all, each note at most ``max_note_chars`` and each key at most
    ``max_key_chars``; ``eviction`` chooses which notes a full store forgets.

    Invalid writes (empty or oversized note, empty, oversized or control-character key)
    raise ``ValueError`` with a message meant for the model; the store is unchanged.
    """

    def __init__(
        self,
        *,
        max_notes: int = 64,
        max_chars: int = 16_384,
        max_note_chars: int = 1_000,
        max_key_chars: int = 64,
        eviction: str = "lru",
    ) -> None:
        for name, value in (
            ("max_notes", max_notes),
            ("max_chars", max_chars),
            ("max_note_chars", max_note_chars),
            ("max_key_chars", max_key_chars),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        if eviction not in EVICTION_POLICIES:
            raise ValueError(f"eviction: expected one of {', '.join(EVICTION_POLICIES)}, got {eviction!r}")
        self.max_notes, self.max_chars, self.max_note_chars, self.max_key_chars, self.eviction = (
            max_notes,
            max_chars,
            max_note_chars,
            max_key_chars,
            eviction,
        )
        self._notes: OrderedDict[str, str] = OrderedDict()  # first = next to forget
        self._chars = 0
        self._lock = threading.Lock()
        self._version = 0  # bumped on every change; the search index is rebuilt when it moved
        self._index: tuple[int, BM25Retriever | None] = (-1, None)
        self._next_auto_key = 0
        self.evictions = 0
        """Notes forgotten since the store was made (all episodes)."""

    # ----------------------------------------------------------------- validation

    def check_key(self, key: str) -> str:
        """The key as stored (surrounding whitespace removed); ValueError if it is unusable."""
        if not isinstance(key, str):
            raise ValueError(f"the key must be a string, got {type(key).__name__}")
        key = key.strip()
        if not key:
            raise ValueError("the key is empty; give the note a short name")
        if len(key) > self.max_key_chars:
            raise ValueError(f"the key has {len(key)} characters; a key has at most {self.max_key_chars}")
        if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in key):
            raise ValueError("the key has control or unprintable characters; use letters, digits and punctuation")
        return key

    def _check_text(self, text: str) -> None:
        if not isinstance(text, str):
            raise ValueError(f"the note must be a string, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("the note is empty; write what you want to remember")
        limit = min(self.max_note_chars, self.max_chars)
        if len(text) > limit:
            raise ValueError(f"the note has {len(text)} characters; a note holds at most {limit}. Write a shorter note")

    # ----------------------------------------------------------------- operations

    def write(self, text: str, key: str | None = None) -> WriteOutcome:
        """Store ``text`` under ``key`` (a new ``note-N`` key when None), replacing a note
        with that key and forgetting others by the eviction policy until it fits."""
        self._check_text(text)
        key = None if key is None else self.check_key(key)
        with self._lock:
            if key is None:
                while f"note-{self._next_auto_key}" in self._notes:
                    self._next_auto_key += 1
                key = f"note-{self._next_auto_key}"
                self._next_auto_key += 1
            old = self._notes.pop(key, None)
            if old is not None:
                self._chars -= len(old)
            evicted = []
            while self._notes and (len(self._notes) >= self.max_notes or self._chars + len(text) > self.max_chars):
                gone, gone_text = self._notes.popitem(last=False)
                self._chars -= len(gone_text)
                evicted.append(gone)
            self._notes[key] = text
            self._chars += len(text)
            self.evictions += len(evicted)
            self._version += 1
            return WriteOutcome(key, old is not None, tuple(evicted), len(self._notes))

    def read(self, key: str) -> str | None:
        """The note under ``key`` (None when there is none); with ``lru`` a read counts as a use."""
        key = self.check_key(key)
        with self._lock:
            text = self._notes.get(key)
            if text is not None and self.eviction == "lru":
                self._notes.move_to_end(key)
            return text

    def search(self, query: str, k: int = 3) -> list[tuple[str, str]]:
        """The (key, text) of the at most ``k`` notes that best match ``query`` (BM25 over
        key and text; only notes sharing a word with the query); found notes count as used."""
        if k < 1:
            raise ValueError(f"k must be a positive int, got {k}")
        with self._lock:
            version, index = self._index
            if version != self._version:
                # Notes with no indexable word (stopwords only) can never match; bm25s
                # refuses a corpus without any word.
                documents = [
                    Document(id=key, title=key, text=text)
                    for key, text in self._notes.items()
                    if tokenize(f"{key} {text}")
                ]
                index = BM25Retriever.from_documents(documents) if documents else None
                self._index = (self._version, index)
            found = index.search(query, k) if index is not None else []
            results = [(doc.id, self._notes[doc.id]) for doc in found if doc.id in self._notes]
            if self.eviction == "lru":
                for key, _ in results:
                    self._notes.move_to_end(key)
            return results

    def keys(self) -> list[str]:
        """Keys from the next note to forget to the last."""
        with self._lock:
            return list(self._notes)

    @property
    def chars(self) -> int:
        """Characters of note text stored."""
        return self._chars

    def clear(self) -> None:
        with self._lock:
            self._notes.clear()
            self._chars = 0
            self._next_auto_key = 0
            self._version += 1

    def state_dict(self) -> dict[str, Any]:
        """The notes (in forgetting order) and counters, as JSON-ready values."""
        with self._lock:
            return {
                "notes": [[key, text] for key, text in self._notes.items()],
                "next_auto_key": self._next_auto_key,
                "evictions": self.evictions,
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the notes and counters with :meth:`state_dict`'s; ValueError (the store
        unchanged) when a note breaks this store's caps."""
        notes = OrderedDict()
        for key, text in state["notes"]:
            self._check_text(text)
            notes[self.check_key(key)] = text
        chars = sum(map(len, notes.values()))
        if len(notes) > self.max_notes or chars > self.max_chars:
            raise ValueError(
                f"the saved store holds {len(notes)} notes and {chars} characters; this store allows {self.max_notes} and {self.max_chars}"
            )
        with self._lock:
            self._notes, self._chars = notes, chars
            self._next_auto_key = int(state.get("next_auto_key", 0))
            self.evictions = int(state.get("evictions", 0))
            self._version += 1

    def __len__(self) -> int:
        return len(self._notes)

    def __contains__(self, key: object) -> bool:
        return key in self._notes

    def __repr__(self) -> str:
        return f"MemoryStore({len(self)} notes, {self.chars} chars, max_notes={self.max_notes}, max_chars={self.max_chars}, eviction={self.eviction!r})"


# --------------------------------------------------------------------------- shared stores


_SHARED: dict[tuple, MemoryStore] = {}
_SHARED_LOCK = threading.Lock()


def shared_store(name: str = "default", **caps: Any) -> MemoryStore:
    """The process-wide store named ``name`` with these caps (made on first use). Envs are
    rebuilt per episode; the store outlives them. Different caps give different stores."""
    key = (name, *sorted(caps.items()))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = MemoryStore(**caps)
        return _SHARED[key]


def shared_stores_state() -> list[dict[str, Any]]:
    """Every shared store of this process (name, caps, notes, counters) as JSON-ready
    values: what a checkpoint keeps so that a resumed run's agents find their notes."""
    with _SHARED_LOCK:
        stores = list(_SHARED.items())
    return [{"name": key[0], "caps": dict(key[1:]), **store.state_dict()} for key, store in stores]


def load_shared_stores(states: list[Mapping[str, Any]]) -> None:
    """Restore :func:`shared_stores_state`'s stores into this process (each made if
    missing, its notes replaced)."""
    for state in states:
        shared_store(state["name"], **state["caps"]).load_state_dict(state)

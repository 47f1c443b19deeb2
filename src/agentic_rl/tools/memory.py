"""Memory tools: ``memory_write``, ``memory_read`` and ``memory_search`` over bounded notes.

A :class:`MemoryStore` holds notes by key with caps on the number of notes, the total
characters and the size of one note; when a write would pass a cap, notes are forgotten
by the eviction policy (``lru``: the note used longest ago, ``fifo``: the note written
longest ago). Searches rank notes with the library's BM25 (:mod:`agentic_rl.retrieval.bm25`),
re-indexed only after a change. Every method is thread-safe: episodes run concurrently
in threads, and a shared store is written by all of them.

:class:`MemoryTools` is one episode's view: the three tools, bound to a store of its own
(``episode`` mode, cleared by :meth:`MemoryTools.reset`) or to a process-wide store shared
by every episode (``shared`` mode, :func:`shared_store`), with per-episode counters
(:meth:`MemoryTools.metrics`) and a cap on writes per episode. Every limit a model can hit
comes back as an error observation, never as an exception or unbounded growth.
"""

from __future__ import annotations

import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agentic_rl.retrieval.base import Document
from agentic_rl.retrieval.bm25 import BM25Retriever, tokenize
from agentic_rl.tools.base import Tool, tool
from agentic_rl.tools.registry import ToolRegistry

__all__ = [
    "EVICTION_POLICIES",
    "MEMORY_MODES",
    "MEMORY_TOOL_NAMES",
    "MemoryConfig",
    "MemoryStore",
    "MemoryTools",
    "WriteOutcome",
    "add_memory_tools",
    "load_shared_stores",
    "memory_tools",
    "shared_store",
    "shared_stores_state",
]

EVICTION_POLICIES = ("lru", "fifo")
MEMORY_MODES = ("none", "episode", "shared")
MEMORY_TOOL_NAMES = ("memory_write", "memory_read", "memory_search")
MAX_SEARCH_K = 10
MAX_QUERY_CHARS = 1_000
_KEYS_SHOWN = 20  # a read miss lists at most this many keys


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


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class MemoryConfig:
    """The ``memory`` env option: a mode name, or a mapping of these fields."""

    mode: str = "none"
    """``none`` (no memory tools), ``episode`` (a scratch memory per episode) or ``shared``
    (one store for every episode of this process with the same ``store`` and caps)."""
    max_notes: int = 64
    """Most notes held at once; writing one more forgets one."""
    max_chars: int = 16_384
    """Most characters of note text held at once."""
    max_note_chars: int = 1_000
    """Most characters in one note; a longer note is refused (an error observation)."""
    max_key_chars: int = 64
    """Most characters in one key."""
    max_writes: int = 64
    """Most accepted writes per episode; later ones are refused."""
    eviction: str = "lru"
    """``lru`` forgets the note used (written, read or found) longest ago; ``fifo`` the note written longest ago."""
    store: str = "default"
    """Name of the shared store (``shared`` mode): envs naming the same store share notes."""
    tools: tuple[str, ...] = MEMORY_TOOL_NAMES
    """Which memory tools the agent is offered (each tool's schema costs prompt tokens: a
    small model's task may need only ``memory_write`` and ``memory_read``)."""

    def __post_init__(self) -> None:
        if self.mode not in MEMORY_MODES:
            raise ValueError(
                f"memory: expected one of {', '.join(MEMORY_MODES)} (or a mapping with 'mode'), got {self.mode!r}"
            )
        for name in ("max_notes", "max_chars", "max_note_chars", "max_key_chars", "max_writes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"memory.{name}: expected a positive int, got {value!r}")
        if self.eviction not in EVICTION_POLICIES:
            raise ValueError(f"memory.eviction: expected one of {', '.join(EVICTION_POLICIES)}, got {self.eviction!r}")
        if not isinstance(self.store, str) or not self.store:
            raise ValueError(f"memory.store: expected a non-empty name, got {self.store!r}")
        tools = (self.tools,) if isinstance(self.tools, str) else self.tools
        if (
            not isinstance(tools, (list, tuple))
            or not tools
            or any(name not in MEMORY_TOOL_NAMES for name in tools)
            or len(set(tools)) != len(tools)
        ):
            raise ValueError(
                f"memory.tools: expected a non-empty list of distinct names from {', '.join(MEMORY_TOOL_NAMES)}, got {self.tools!r}"
            )
        object.__setattr__(self, "tools", tuple(tools))

    @classmethod
    def parse(cls, spec: Any) -> MemoryConfig:
        """A config from the option's value: None / False / "none", True / "episode",
        "shared", or a mapping (``{"mode": "shared", "max_notes": 100}``)."""
        if spec is None or spec is False:
            return cls()
        if spec is True:
            return cls(mode="episode")
        if isinstance(spec, str):
            return cls(mode=spec)
        if isinstance(spec, MemoryConfig):
            return spec
        if isinstance(spec, Mapping):
            known = [item.name for item in fields(cls)]
            unknown = sorted(set(map(str, spec)) - set(known))
            if unknown:
                raise ValueError(f"memory: unknown key {unknown[0]!r}; expected keys: {', '.join(known)}")
            return cls(**{str(key): value for key, value in spec.items()})
        raise ValueError(f"memory: expected one of {', '.join(MEMORY_MODES)} or a mapping, got {spec!r}")

    def store_caps(self) -> dict[str, Any]:
        return {
            "max_notes": self.max_notes,
            "max_chars": self.max_chars,
            "max_note_chars": self.max_note_chars,
            "max_key_chars": self.max_key_chars,
            "eviction": self.eviction,
        }


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


# --------------------------------------------------------------------------- tools


_COUNTERS = ("writes", "rejected", "reads", "searches", "hits", "misses", "evictions")


class MemoryTools:
    """One episode's memory tools (those of ``memory_write``, ``memory_read``,
    ``memory_search`` named in ``tools``) over ``store`` (a fresh one per episode when ``shared`` is False), with counters.

    ``reset()`` starts the next episode: counters to zero, and a non-shared store cleared.
    ``metrics()`` gives ``memory/<counter>`` values for an env's ``episode_metrics``.
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        shared: bool = False,
        max_writes: int = 64,
        tools: tuple[str, ...] = MEMORY_TOOL_NAMES,
    ) -> None:
        if not isinstance(max_writes, int) or isinstance(max_writes, bool) or max_writes < 1:
            raise ValueError(f"max_writes: expected a positive int, got {max_writes!r}")
        unknown = [name for name in tools if name not in MEMORY_TOOL_NAMES]
        if unknown or not tools:
            raise ValueError(f"tools: expected names from {', '.join(MEMORY_TOOL_NAMES)}, got {list(tools)!r}")
        self.offered = tuple(tools)
        self.store = store if store is not None else MemoryStore()
        self.shared = shared
        self.max_writes = max_writes
        self._lock = threading.Lock()
        self.counts = dict.fromkeys(_COUNTERS, 0)
        self.tools: list[Tool] = self._make_tools()

    @classmethod
    def from_config(cls, config: MemoryConfig) -> MemoryTools | None:
        if config.mode == "none":
            return None
        if config.mode == "shared":
            return cls(
                shared_store(config.store, **config.store_caps()),
                shared=True,
                max_writes=config.max_writes,
                tools=config.tools,
            )
        return cls(MemoryStore(**config.store_caps()), max_writes=config.max_writes, tools=config.tools)

    def reset(self) -> None:
        with self._lock:
            self.counts = dict.fromkeys(_COUNTERS, 0)
        if not self.shared:
            self.store.clear()

    def _count(self, **increments: int) -> None:
        with self._lock:
            for name, value in increments.items():
                self.counts[name] += value

    def metrics(self) -> dict[str, float]:
        """This episode's ``memory/writes`` (accepted), ``memory/rejected`` (refused writes),
        ``memory/reads``, ``memory/searches``, ``memory/hits`` / ``memory/misses`` (reads and
        searches that found something / nothing), ``memory/evictions`` (notes its writes
        made the store forget) and ``memory/notes`` (notes held at the end)."""
        with self._lock:
            metrics = {f"memory/{name}": float(value) for name, value in self.counts.items()}
        metrics["memory/notes"] = float(len(self.store))
        return metrics

    def _write(self, text: str, key: str | None) -> str:
        with self._lock:
            # Reserve the write first, so concurrent calls cannot pass the cap together.
            allowed = self.counts["writes"] < self.max_writes
            if allowed:
                self.counts["writes"] += 1
        if not allowed:
            self._count(rejected=1)
            raise ValueError(
                f"the write limit of this episode is reached ({self.max_writes} notes written); use the notes you have"
            )
        try:
            outcome = self.store.write(text, key)
        except ValueError:
            self._count(writes=-1, rejected=1)
            raise
        self._count(evictions=len(outcome.evicted))
        message = f"{'Replaced' if outcome.replaced else 'Saved'} note {outcome.key!r} ({len(text)} characters; notes in memory: {outcome.notes})."
        if outcome.evicted:
            shown = ", ".join(repr(k) for k in outcome.evicted[:5]) + (
                f" and {len(outcome.evicted) - 5} more" if len(outcome.evicted) > 5 else ""
            )
            message += f" Memory was full: forgot {shown}."
        return message

    def _read(self, key: str) -> str:
        self._count(reads=1)
        try:
            text = self.store.read(key)
        except ValueError:
            self._count(misses=1)
            raise
        if text is None:
            self._count(misses=1)
            keys = self.store.keys()
            listed = ", ".join(repr(k) for k in keys[-_KEYS_SHOWN:]) or "none"
            more = f" (and {len(keys) - _KEYS_SHOWN} older)" if len(keys) > _KEYS_SHOWN else ""
            raise ValueError(f"no note with key {key.strip()!r}; keys in memory: {listed}{more}")
        self._count(hits=1)
        return text

    def _search(self, query: str, k: int) -> str:
        if not 1 <= k <= MAX_SEARCH_K:
            raise ValueError(f"k must be between 1 and {MAX_SEARCH_K}, got {k}")
        if not query.strip():
            raise ValueError("the query is empty; write what you are looking for")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"the query has {len(query)} characters; a query has at most {MAX_QUERY_CHARS}")
        self._count(searches=1)
        results = self.store.search(query, k)
        self._count(**({"hits": 1} if results else {"misses": 1}))
        if not results:
            return f"No note matches {query.strip()[:100]!r}."
        return "\n".join(f"[{key}] {text}" for key, text in results)

    def _make_tools(self) -> list[Tool]:
        @tool(name="memory_write")
        def memory_write(text: str, key: str | None = None) -> str:
            """Save a note in your memory, to read it back later.

            Args:
                text: The note, e.g. "Paris is the capital of France".
                key: A short name for the note; writing to an existing key replaces that note. Default: a new key.
            """
            return self._write(text, key)

        @tool(name="memory_read")
        def memory_read(key: str) -> str:
            """Read the note saved under a key.

            Args:
                key: The key the note was saved under.
            """
            return self._read(key)

        @tool(name="memory_search")
        def memory_search(query: str, k: int = 3) -> str:
            """Find the saved notes that best match a query (keyword search), one per line as [key] text.

            Args:
                query: Words to look for, e.g. "capital France".
                k: How many notes to return, 1 to 10.
            """
            return self._search(query, k)

        return [item for item in (memory_write, memory_read, memory_search) if item.name in self.offered]


def memory_tools(spec: Any) -> MemoryTools | None:
    """The :class:`MemoryTools` an env's ``memory`` option asks for (None for ``none``);
    ValueError naming the option's bad field otherwise."""
    if isinstance(spec, MemoryTools):
        return spec
    return MemoryTools.from_config(MemoryConfig.parse(spec))


def add_memory_tools(registry: ToolRegistry, spec: Any) -> MemoryTools | None:
    """Register the memory tools ``spec`` asks for in ``registry`` (for envs that build
    their own registry); returns the MemoryTools (None for ``none``: nothing added), whose
    ``reset()`` the env calls at each reset and whose ``metrics()`` it reports."""
    memory = memory_tools(spec)
    if memory is None:
        return None
    for item in memory.tools:
        registry.register(item)
    return memory

"""Memory tools: ``memory_write``, ``memory_read`` and ``memory_search`` over bounded notes.

The notes live in a :class:`~agentic_rl.tools.memory_store.MemoryStore` (caps, ``lru`` /
``fifo`` forgetting, BM25 search; see :mod:`agentic_rl.tools.memory_store`).
:class:`MemoryConfig` is the envs' ``memory`` option. :class:`MemoryTools` is one
episode's view: the three tools, bound to a store of its own (``episode`` mode, cleared by
:meth:`MemoryTools.reset`) or to a process-wide store shared by every episode (``shared``
mode, :func:`~agentic_rl.tools.memory_store.shared_store`), with per-episode counters
(:meth:`MemoryTools.metrics`) and a cap on writes per episode. Every limit a model can hit
comes back as an error observation, never as an exception or unbounded growth.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agentic_rl.tools.base import Tool, tool
from agentic_rl.tools.memory_store import EVICTION_POLICIES, MemoryStore, shared_store
from agentic_rl.tools.registry import ToolRegistry

__all__ = [
    "MEMORY_MODES",
    "MEMORY_TOOL_NAMES",
    "MemoryConfig",
    "MemoryTools",
    "add_memory_tools",
    "memory_tools",
]

MEMORY_MODES = ("none", "episode", "shared")
MEMORY_TOOL_NAMES = ("memory_write", "memory_read", "memory_search")
MAX_SEARCH_K = 10
MAX_QUERY_CHARS = 1_000
_KEYS_SHOWN = 20  # a read miss lists at most this many keys


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

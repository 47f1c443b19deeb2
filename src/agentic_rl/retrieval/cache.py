"""A thread-safe LRU cache of search results keyed by ``(query, k)``."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from agentic_rl.retrieval.base import Document, Retriever

__all__ = ["CachedRetriever"]


class CachedRetriever:
    """Wraps a retriever; repeated ``(query, k)`` pairs are answered from memory.

    The key is the query exactly as given (no normalization: different text can rank
    differently) and k. ``hits`` / ``misses`` count lookups; ``max_size`` bounds memory
    (least recently used entries go first).
    """

    def __init__(self, retriever: Retriever, max_size: int = 10_000) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be a positive int, got {max_size}")
        self.retriever = retriever
        self.max_size = max_size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, int], tuple[Document, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 3) -> list[Document]:
        key = (query, k)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return list(self._entries[key])
            self.misses += 1
        result = tuple(self.retriever.search(query, k))  # outside the lock: searches run in parallel
        with self._lock:
            self._entries[key] = result
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)
        return list(result)

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Document]]:
        return [self.search(query, k) for query in queries]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

"""BM25 over a local corpus with ``bm25s``: built once, saved, memory-mapped on load.

An index folder holds the ``bm25s`` score matrix (``bm25/``, loaded with ``mmap=True``
so its arrays stay on disk and are paged in on demand), the documents as JSONL
(``docs.jsonl``) with a memory-mapped array of line offsets (``offsets.npy``), and
``meta.json``. Documents are read with ``os.pread``, so one loaded index serves many
threads without loading the corpus into memory.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentic_rl.retrieval.base import Document, read_corpus

__all__ = ["BM25Retriever", "build_index", "load_index", "tokenize"]

FORMAT_VERSION = 1
_WORD = re.compile(r"\w+")


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_STOPWORDS: frozenset[str] | None = None


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without English stopwords (the same for documents and queries)."""
    global _STOPWORDS
    if _STOPWORDS is None:
        _STOPWORDS = _stopwords()
    return [token for token in _WORD.findall(text.lower()) if token not in _STOPWORDS]


def _document_tokens(doc: Document) -> list[str]:
    return tokenize(f"{doc.title} {doc.text}")


class BM25Retriever:
    """BM25 (Lucene variant, k1=1.5, b=0.75) over documents indexed with ``bm25s``.

    Build in memory with :meth:`from_documents`, or on disk with :func:`build_index`
    and open with :func:`load_index` (memory-mapped).
    """

    def __init__(
        self,
        model: Any,
        documents: Sequence[Document] | None = None,
        *,
        docs_path: Path | None = None,
        offsets: np.ndarray | None = None,
    ) -> None:
        self.model = model
        self._documents = list(documents) if documents is not None else None
        self._offsets = offsets
        self._fd = os.open(docs_path, os.O_RDONLY) if docs_path is not None else None
        self.num_docs = len(self._documents) if self._documents is not None else len(offsets) - 1  # type: ignore[arg-type]
        self._vocab: dict[str, int] = model.vocab_dict

    @classmethod
    def from_documents(cls, documents: Iterable[Document], *, k1: float = 1.5, b: float = 0.75) -> BM25Retriever:
        """Index documents in memory (small corpora, tests, the built-in demo)."""
        import bm25s

        documents = list(documents)
        if not documents:
            raise ValueError("cannot index an empty corpus")
        model = bm25s.BM25(k1=k1, b=b)
        model.index([_document_tokens(doc) for doc in documents], show_progress=False)
        return cls(model, documents)

    def document(self, index: int) -> Document:
        """The index-th document of the corpus (by position)."""
        if self._documents is not None:
            return self._documents[index]
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])  # type: ignore[index]
        data = json.loads(os.pread(self._fd, end - start, start))  # type: ignore[arg-type]
        return Document(id=str(data["id"]), title=str(data.get("title", "")), text=str(data.get("text", "")))

    def search(self, query: str, k: int = 3) -> list[Document]:
        """The top-k documents for ``query`` (only documents sharing a term with it)."""
        if k < 1:
            raise ValueError(f"k must be a positive int, got {k}")
        ids = [self._vocab[token] for token in tokenize(query) if token in self._vocab]
        if not ids:
            return []
        scores = self.model.get_scores_from_ids(ids)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [Document(**{**self.document(int(i)).__dict__, "score": float(scores[i])}) for i in top if scores[i] > 0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Document]]:
        return [self.search(query, k) for query in queries]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def build_index(
    documents: Iterable[Document] | str | Path, out_dir: str | Path, *, k1: float = 1.5, b: float = 0.75
) -> dict[str, Any]:
    """Index a corpus (documents or a JSONL path) into ``out_dir``; returns ``meta.json``'s content.

    Document ids must be unique.
    """
    import bm25s

    started = time.perf_counter()
    if isinstance(documents, (str, Path)):
        documents = read_corpus(documents)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokens: list[list[str]] = []
    offsets = [0]
    seen: set[str] = set()
    with open(out / "docs.jsonl", "wb") as handle:
        for doc in documents:
            if doc.id in seen:
                raise ValueError(f"duplicate document id {doc.id!r}")
            seen.add(doc.id)
            line = (json.dumps({"id": doc.id, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n").encode(
                "utf-8"
            )
            handle.write(line)
            offsets.append(offsets[-1] + len(line))
            tokens.append(_document_tokens(doc))
    if not tokens:
        raise ValueError("cannot index an empty corpus")
    np.save(out / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    model = bm25s.BM25(k1=k1, b=b)
    model.index(tokens, show_progress=False)
    model.save(out / "bm25", show_progress=False)
    meta = {
        "kind": "bm25",
        "format_version": FORMAT_VERSION,
        "num_docs": len(tokens),
        "k1": k1,
        "b": b,
        "build_time_s": time.perf_counter() - started,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def load_index(index_dir: str | Path, *, mmap: bool = True) -> BM25Retriever:
    """Open an index folder written by :func:`build_index` (memory-mapped by default)."""
    import bm25s

    folder = Path(index_dir)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise FileNotFoundError(
            f"{folder} is not an index folder (no meta.json); build one with `agentic-rl index build`"
        )
    meta = json.loads(meta_path.read_text())
    if meta.get("kind") != "bm25" or meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{folder}: unsupported index kind/version {meta.get('kind')!r}/{meta.get('format_version')!r}"
        )
    model = bm25s.BM25.load(folder / "bm25", mmap=mmap, show_progress=False)
    offsets = np.load(folder / "offsets.npy", mmap_mode="r" if mmap else None)
    return BM25Retriever(model, docs_path=folder / "docs.jsonl", offsets=offsets)

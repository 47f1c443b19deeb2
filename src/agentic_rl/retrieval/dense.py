"""Optional dense retrieval (faiss + an embedding model you supply) and a reciprocal-rank-fusion hybrid.

``DenseRetriever`` needs ``faiss`` (``pip install agentic-rl[dense]`` or ``faiss-cpu``)
and an embedding function: any callable ``list[str] -> array (n, dim)``, or a
sentence-transformers model name/path (loaded with ``sentence_transformers``). Vectors
are L2-normalized and searched by inner product (cosine). ``HybridRetriever`` fuses any
retrievers with reciprocal rank fusion and needs nothing extra.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from agentic_rl.retrieval.base import Document, Retriever

__all__ = ["DenseRetriever", "HybridRetriever", "reciprocal_rank_fusion"]

Embedder = Callable[[list[str]], Any]


def _require_faiss():
    from agentic_rl.optional import require

    return require("faiss", "pip install faiss-cpu (or agentic-rl[dense])", "dense retrieval")


def _embedder(model: str | Embedder) -> Embedder:
    if callable(model):
        return model
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ImportError(
            f"embedding model {model!r} given by name needs sentence-transformers (pip install sentence-transformers); "
            "or pass a callable list[str] -> array of shape (n, dim)"
        ) from None
    encoder = SentenceTransformer(model)
    return lambda texts: encoder.encode(texts, convert_to_numpy=True, show_progress_bar=False)


def _normalized(vectors: Any) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"the embedding model must return a 2-D array (n, dim), got shape {array.shape}")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return array / np.maximum(norms, 1e-12)


class DenseRetriever:
    """Exact inner-product (cosine) search over embedded ``title + text`` with faiss."""

    def __init__(self, documents: Iterable[Document], model: str | Embedder, *, batch_size: int = 64) -> None:
        faiss = _require_faiss()
        self.embed = _embedder(model)
        self.documents = list(documents)
        if not self.documents:
            raise ValueError("cannot index an empty corpus")
        texts = [f"{doc.title}\n{doc.text}" for doc in self.documents]
        vectors = np.concatenate(
            [_normalized(self.embed(texts[i : i + batch_size])) for i in range(0, len(texts), batch_size)]
        )
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(vectors)
        self.num_docs = len(self.documents)

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Document]]:
        if k < 1:
            raise ValueError(f"k must be a positive int, got {k}")
        scores, ids = self.index.search(_normalized(self.embed(list(queries))), min(k, self.num_docs))
        return [
            [
                Document(**{**self.documents[i].__dict__, "score": float(s)})
                for s, i in zip(row_scores, row_ids)
                if i >= 0
            ]
            for row_scores, row_ids in zip(scores, ids)
        ]

    def search(self, query: str, k: int = 3) -> list[Document]:
        return self.search_batch([query], k)[0]


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Document]], k: int, *, rrf_k: float = 60.0) -> list[Document]:
    """Fuse ranked lists: score(d) = sum over lists of 1 / (rrf_k + rank), rank from 1
    (Cormack et al. 2009). Ties keep first-seen order; the fused score replaces ``score``."""
    fused: dict[str, float] = {}
    first: dict[str, Document] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            fused[doc.id] = fused.get(doc.id, 0.0) + 1.0 / (rrf_k + rank)
            first.setdefault(doc.id, doc)
    order = sorted(fused, key=lambda doc_id: -fused[doc_id])  # sorted is stable: ties keep first-seen order
    return [Document(**{**first[doc_id].__dict__, "score": fused[doc_id]}) for doc_id in order[:k]]


class HybridRetriever:
    """Reciprocal rank fusion of several retrievers (e.g. BM25 + dense); each is asked
    for ``depth`` results (default 2k) before fusing."""

    def __init__(self, retrievers: Sequence[Retriever], *, rrf_k: float = 60.0, depth: int | None = None) -> None:
        if not retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        self.retrievers, self.rrf_k, self.depth = list(retrievers), rrf_k, depth

    def search(self, query: str, k: int = 3) -> list[Document]:
        depth = self.depth or 2 * k
        return reciprocal_rank_fusion([r.search(query, depth) for r in self.retrievers], k, rrf_k=self.rrf_k)

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Document]]:
        return [self.search(query, k) for query in queries]

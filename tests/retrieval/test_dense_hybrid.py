"""Reciprocal rank fusion by hand, the hybrid retriever, and dense retrieval's optional deps."""

import importlib.util

import numpy as np
import pytest

from agentic_rl.retrieval import BM25Retriever, Document
from agentic_rl.retrieval.dense import DenseRetriever, HybridRetriever, reciprocal_rank_fusion

A, B, C = Document("a", "A", "alpha"), Document("b", "B", "beta"), Document("c", "C", "gamma")


def test_rrf_hand_computed():
    fused = reciprocal_rank_fusion([[A, B], [B, C]], k=3, rrf_k=1.0)
    # a: 1/2; b: 1/3 + 1/2 = 5/6; c: 1/3
    assert [d.id for d in fused] == ["b", "a", "c"]
    assert [d.score for d in fused] == pytest.approx([5 / 6, 1 / 2, 1 / 3])
    assert len(reciprocal_rank_fusion([[A, B], [B, C]], k=1)) == 1


def test_hybrid_of_bm25_retrievers():
    bm25 = BM25Retriever.from_documents([A, B, C])
    hybrid = HybridRetriever([bm25, bm25])
    assert [d.id for d in hybrid.search("beta", 2)] == ["b"]


@pytest.mark.skipif(importlib.util.find_spec("faiss") is not None, reason="faiss is installed")
def test_dense_without_faiss_fails_clearly():
    with pytest.raises(ImportError, match="faiss-cpu"):
        DenseRetriever([A], lambda texts: np.ones((len(texts), 4)))


@pytest.mark.skipif(importlib.util.find_spec("faiss") is None, reason="needs faiss")
def test_dense_with_a_toy_embedder():
    vocab = ["alpha", "beta", "gamma"]
    embed = lambda texts: np.array([[float(w in t) for w in vocab] for t in texts])  # noqa: E731
    dense = DenseRetriever([A, B, C], embed)
    assert dense.search("gamma", 1)[0].id == "c"

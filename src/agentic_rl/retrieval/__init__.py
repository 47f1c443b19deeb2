"""Retrieval: documents, retrievers behind one ``search(query, k)`` interface, caching, serving.

- :class:`BM25Retriever` (``bm25s``; :func:`build_index` / :func:`load_index`, memory-mapped),
- :class:`DenseRetriever` and :class:`HybridRetriever` (optional: faiss + your embedding model),
- :class:`HTTPRetriever` / :class:`RetrievalServer` (Search-R1 protocol, loopback by default),
- :class:`CachedRetriever` (results keyed by ``(query, k)``),
- web search APIs (:mod:`agentic_rl.retrieval.web_search`: Brave, Tavily) and ZeroSearch's
  LLM-simulated search engine (:mod:`agentic_rl.retrieval.simulated`).
"""

from agentic_rl.retrieval.base import Document, Retriever, format_documents, read_corpus, write_corpus
from agentic_rl.retrieval.bm25 import BM25Retriever, build_index, load_index
from agentic_rl.retrieval.cache import CachedRetriever
from agentic_rl.retrieval.dense import DenseRetriever, HybridRetriever, reciprocal_rank_fusion
from agentic_rl.retrieval.http import HTTPRetriever, RetrievalServer

__all__ = [
    "BM25Retriever",
    "CachedRetriever",
    "DenseRetriever",
    "Document",
    "HTTPRetriever",
    "HybridRetriever",
    "RetrievalServer",
    "Retriever",
    "build_index",
    "format_documents",
    "load_index",
    "read_corpus",
    "reciprocal_rank_fusion",
    "write_corpus",
]

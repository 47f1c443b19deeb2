"""BM25 retrieval (in memory and a saved, memory-mapped index) and the result cache."""

import numpy as np
import pytest

from agentic_rl.retrieval import (
    BM25Retriever,
    CachedRetriever,
    Document,
    build_index,
    format_documents,
    load_index,
    read_corpus,
    write_corpus,
)

DOCS = [
    Document("a", "Vexora Dynamics", "Vexora Dynamics is a shipping company founded in 1902 by Lina Marsh."),
    Document("b", "Lina Marsh", "Lina Marsh was a chemist born in Orvale in 1871."),
    Document("c", "Orvale", "Orvale is a city in the country of Dyvour."),
    Document("d", "Kalo Works", "Kalo Works is a textile company founded in 1920 by Tam Oru."),
]


def test_in_memory_ranking():
    retriever = BM25Retriever.from_documents(DOCS)
    top = retriever.search("Lina Marsh born", k=2)
    assert [d.id for d in top] == ["b", "a"]
    assert top[0].score >= top[1].score > 0
    assert retriever.search("completely unknown words", k=3) == []
    assert retriever.search("the of a", k=3) == []  # stopwords only
    assert len(retriever.search("company", k=10)) == 2  # only documents sharing a term
    with pytest.raises(ValueError):
        retriever.search("x", k=0)


def test_saved_index_is_memory_mapped_and_equivalent(tmp_path):
    corpus = write_corpus(DOCS, tmp_path / "corpus.jsonl")
    meta = build_index(corpus, tmp_path / "index")
    assert meta["num_docs"] == 4
    loaded = load_index(tmp_path / "index")
    assert isinstance(loaded.model.scores["data"], np.memmap)
    assert isinstance(loaded._offsets, np.memmap)
    memory = BM25Retriever.from_documents(read_corpus(corpus))
    for query in ("Lina Marsh born", "Orvale country", "textile company founded"):
        assert loaded.search(query, 3) == memory.search(query, 3)
    loaded.close()


def test_build_index_errors(tmp_path):
    with pytest.raises(ValueError, match="duplicate"):
        build_index([DOCS[0], DOCS[0]], tmp_path / "dup")
    with pytest.raises(ValueError, match="empty"):
        build_index([], tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="index build"):
        load_index(tmp_path / "nothing")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "ok"}\n{"title": "no id"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        list(read_corpus(bad))


def test_format_documents_truncates_text():
    text = format_documents(DOCS[:2], max_chars=10)
    assert text.splitlines()[0] == "Doc 1(Title: Vexora Dynamics) Vexora Dyn..."
    assert format_documents([]) == "No results."


class CountingRetriever:
    def __init__(self):
        self.calls = []

    def search(self, query, k=3):
        self.calls.append((query, k))
        return [Document(str(i), "t", query) for i in range(k)]

    def search_batch(self, queries, k=3):
        return [self.search(q, k) for q in queries]


def test_cache_keyed_by_query_and_k():
    inner = CountingRetriever()
    cache = CachedRetriever(inner, max_size=2)
    first = cache.search("q", 2)
    first.append("mutating the returned list must not corrupt the cache")
    assert cache.search("q", 2) == inner.search("q", 2)[:2]
    inner.calls.clear()
    cache.search("q", 2)
    cache.search("q", 3)  # different k: a miss
    cache.search("Q", 2)  # different text: a miss (no normalization)
    assert inner.calls == [("q", 3), ("Q", 2)]
    assert (cache.hits, cache.misses) == (2, 3)
    assert len(cache) == 2  # LRU bound: ("q", 2) was evicted
    cache.search("q", 2)
    assert inner.calls[-1] == ("q", 2)
    cache.clear()
    assert len(cache) == 0 and cache.hits == 0

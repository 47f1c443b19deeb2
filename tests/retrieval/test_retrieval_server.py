"""A loopback round trip through the retrieval server and the HTTP client."""

import httpx
import pytest

from agentic_rl.retrieval import BM25Retriever, Document, HTTPRetriever, RetrievalServer
from agentic_rl.retrieval.http import _parse_document

DOCS = [
    Document("a", "Vexora Dynamics", "Vexora Dynamics is a shipping company founded in 1902 by Lina Marsh."),
    Document("b", "Lina Marsh", "Lina Marsh was a chemist born in Orvale in 1871."),
]


@pytest.fixture()
def server():
    retriever = BM25Retriever.from_documents(DOCS)
    server = RetrievalServer(retriever, "127.0.0.1", 0)
    server.start()
    yield server, retriever
    server.shutdown()
    server.server_close()


def test_round_trip_matches_local_search(server):
    server, local = server
    client = HTTPRetriever(server.url)
    assert client.search("Lina Marsh born", 2) == local.search("Lina Marsh born", 2)
    assert client.search_batch(["Vexora", "nothing here"], 1) == [local.search("Vexora", 1), []]
    health = httpx.get(server.url + "/health").json()
    assert health == {"status": "ok", "num_docs": 2}
    client.close()


def test_bad_requests_get_clear_errors(server):
    server, _ = server
    response = httpx.post(server.url + "/retrieve", json={"queries": "not a list"})
    assert response.status_code == 400 and "list of strings" in response.json()["error"]
    assert httpx.post(server.url + "/retrieve", json={"queries": ["x"], "topk": 0}).status_code == 400
    assert httpx.get(server.url + "/nope").status_code == 404
    with pytest.raises(RuntimeError, match="400"):
        HTTPRetriever(server.url).search("x", k=1000)


def test_refuses_non_loopback_host():
    with pytest.raises(ValueError, match="loopback"):
        RetrievalServer(BM25Retriever.from_documents(DOCS), "0.0.0.0", 0)


def test_parses_plain_search_r1_documents():
    doc = _parse_document({"document": {"id": "7", "contents": '"Title Here"\nbody text'}, "score": 1.5})
    assert doc == Document("7", "Title Here", "body text", 1.5)

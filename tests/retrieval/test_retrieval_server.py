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


def _raw(server, request: bytes) -> bytes:
    """Send raw bytes and read the answer (the connection must not hang)."""
    import socket

    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=10) as connection:
        connection.sendall(request)
        return connection.recv(65536)


def test_bad_content_lengths_are_refused_at_once(server):
    server, _ = server
    body = b'{"queries": ["x"]}'
    assert _raw(server, b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n" + body).startswith(
        b"HTTP/1.1 400"
    )
    assert _raw(
        server, b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ).startswith(b"HTTP/1.1 411")
    big = httpx.post(
        server.url + "/retrieve", content=b"{" + b" " * (2 << 20) + b"}", headers={"Content-Type": "application/json"}
    )
    assert big.status_code == 413 and "too large" in big.json()["error"]


def test_a_loopback_server_answers_only_loopback_host_names(server):
    server, _ = server
    assert httpx.get(server.url + "/health", headers={"Host": "localhost"}).status_code == 200
    rebound = httpx.get(server.url + "/health", headers={"Host": "attacker.example"})
    assert rebound.status_code == 400 and "attacker.example" in rebound.json()["error"]


def test_a_token_is_required_when_set_and_beyond_loopback(monkeypatch):
    retriever = BM25Retriever.from_documents(DOCS)
    with pytest.raises(ValueError, match="requires a bearer token"):
        RetrievalServer(retriever, "0.0.0.0", 0, allow_remote=True)
    server = RetrievalServer(retriever, "127.0.0.1", 0, token="s3cret")
    server.start()
    try:
        assert httpx.post(server.url + "/retrieve", json={"queries": ["Lina"]}).status_code == 401
        assert (
            httpx.post(
                server.url + "/retrieve", json={"queries": ["Lina"]}, headers={"Authorization": "Bearer wrong"}
            ).status_code
            == 401
        )
        monkeypatch.setenv("AGENTIC_RL_RETRIEVER_TOKEN", "s3cret")
        assert HTTPRetriever(server.url).search("Lina Marsh", 1)[0].id == "b"
    finally:
        server.shutdown()
        server.server_close()


def test_a_slow_body_times_out_instead_of_holding_the_server():
    import socket

    retriever = BM25Retriever.from_documents(DOCS)
    server = RetrievalServer(retriever, "127.0.0.1", 0, read_timeout_s=0.5)
    server.start()
    try:
        host, port = server.server_address[:2]
        with socket.create_connection((host, port), timeout=10) as connection:
            connection.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")
            assert connection.recv(65536).startswith(b"HTTP/1.1 408")
        assert httpx.get(server.url + "/health").status_code == 200
    finally:
        server.shutdown()
        server.server_close()

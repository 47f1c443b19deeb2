"""A local stand-in for the web (these machines have no outside network): one server on
127.0.0.1 with Brave- and Tavily-shaped search APIs and fixture pages. It records every
request (method, path, headers, body) for the tests to inspect."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KEY = "sk-test-9f8e7d6c5b4a"

ARTICLE_TEXT = (
    "Vexora Dynamics is an aerospace company founded in 1987 by Ilsa Marrow in the city of Quenport. "
    "It builds small satellites and launch hardware for research institutes."
)
ARTICLE = f"""<html><head><title>Vexora Dynamics - Example Wiki</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About us</a> | <a href="/login">Log in</a> | Subscribe to our newsletter</nav>
<header>Example Wiki: the best wiki of the year, voted by readers</header>
<div class="sidebar">Trending now: celebrity gossip, weather, horoscopes</div>
<main><article><h1>Vexora Dynamics</h1>
<p>{ARTICLE_TEXT}</p>
<p>The company moved its headquarters to Dravenholt in 2004, where it employs around three hundred engineers working on propulsion and guidance systems.</p>
</article></main>
<footer>Copyright 2024 Example Wiki. Privacy policy. Cookie settings. Terms of use.</footer>
</body></html>"""
BOILERPLATE = ("Subscribe to our newsletter", "Log in", "Cookie settings", "Trending now", "best wiki of the year")


class FakeWeb:
    """``start()`` serves until ``close()``; ``url`` is its base URL. ``slow_s``: how long
    ``/slow`` and a search for ``"slow"`` wait before answering."""

    def __init__(self, key: str = KEY, slow_s: float = 3.0) -> None:
        self.key, self.slow_s = key, slow_s
        self.requests: list[dict] = []
        self.big_bytes = 3_000_000
        self.results = [
            {
                "title": "Vexora Dynamics - Example Wiki",
                "url": None,
                "snippet": "Vexora Dynamics is an aerospace company founded in 1987 by Ilsa Marrow.",
            },
            {
                "title": "Vexora answers leaked",
                "url": "https://answers.denied.test/vexora",
                "snippet": "The answer is Ilsa Marrow.",
            },
            {
                "title": "Quenport travel guide",
                "url": "https://travel.example.org/quenport",
                "snippet": "Things to do in Quenport.",
            },
        ]
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.results[0]["url"] = f"{self.url}/article"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeWeb:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, path: str) -> int:
        return sum(1 for request in self.requests if request["path"] == path)

    def _handler(self):
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(
                self,
                status: int,
                body: bytes,
                content_type: str = "text/html; charset=utf-8",
                headers: dict | None = None,
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout)

            def _json(self, status: int, data) -> None:
                self._send(status, json.dumps(data).encode(), "application/json")

            def _record(self, body: bytes = b"") -> tuple[str, dict]:
                parts = urlsplit(self.path)
                web.requests.append(
                    {
                        "method": self.command,
                        "path": parts.path,
                        "query": parse_qs(parts.query),
                        "headers": dict(self.headers.items()),
                        "body": body,
                    }
                )
                return parts.path, parse_qs(parts.query)

            def _search_results(self, query: str, count: int) -> list[dict]:
                if query == "slow":
                    time.sleep(web.slow_s)
                return web.results[:count]

            def do_GET(self) -> None:
                path, query = self._record()
                if path == "/res/v1/web/search":  # Brave
                    token = self.headers.get("X-Subscription-Token", "")
                    if token != web.key:
                        return self._json(401, {"error": f"invalid subscription token {token}"})
                    results = self._search_results(query["q"][0], int(query.get("count", ["20"])[0]))
                    return self._json(
                        200,
                        {
                            "type": "search",
                            "web": {
                                "results": [
                                    {"title": r["title"], "url": r["url"], "description": r["snippet"]} for r in results
                                ]
                            },
                        },
                    )
                if path == "/article":
                    return self._send(200, ARTICLE.encode())
                if path == "/plain":
                    return self._send(200, b"Plain facts: the sky is blue.", "text/plain; charset=utf-8")
                if path == "/file.pdf":
                    return self._send(200, b"%PDF-1.4 ...", "application/pdf")
                if path == "/missing":
                    return self._send(404, b"not here")
                if path == "/slow":
                    time.sleep(web.slow_s)
                    return self._send(200, ARTICLE.encode())
                if path == "/to-denied":
                    return self._send(302, b"", headers={"Location": "https://answers.denied.test/vexora"})
                if path == "/to-article":
                    return self._send(302, b"", headers={"Location": "/article"})
                if path == "/redirect":  # anywhere: /redirect?to=<url>
                    return self._send(302, b"", headers={"Location": query["to"][0]})
                if path == "/big":
                    paragraphs, size, number = [], 0, 0
                    while size < web.big_bytes:  # distinct paragraphs: extractors drop repeated ones
                        number += 1
                        paragraphs.append(
                            f"<p>Filler text number {number} about Quenport harbours and ships. ".encode()
                            + b"More filler about the harbour. " * 10
                            + b"</p>\n"
                        )
                        size += len(paragraphs[-1])
                    body = (
                        b"<html><head><title>Big page</title></head><body><article>"
                        + b"".join(paragraphs)
                        + b"</article></body></html>"
                    )
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    try:
                        for start in range(0, len(body), 65536):
                            self.wfile.write(body[start : start + 65536])
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the client stopped reading at its byte cap
                    return None
                return self._send(404, b"no such page")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                path, _ = self._record(body)
                if path == "/search":  # Tavily
                    if self.headers.get("Authorization", "") != f"Bearer {web.key}":
                        return self._json(
                            401, {"detail": {"error": f"Unauthorized: {self.headers.get('Authorization', '')}"}}
                        )
                    request = json.loads(body)
                    results = self._search_results(request["query"], int(request.get("max_results", 5)))
                    return self._json(
                        200,
                        {
                            "query": request["query"],
                            "results": [
                                {"title": r["title"], "url": r["url"], "content": r["snippet"], "score": 0.9 - 0.1 * i}
                                for i, r in enumerate(results)
                            ],
                        },
                    )
                return self._json(404, {"error": "no such endpoint"})

        return Handler

"""Web search APIs behind the retriever interface: ``search(query, k) -> list[Document]``
with the result's URL as ``id``, its title, and its snippet as ``text``.

Providers: Brave (``GET {base}/res/v1/web/search?q=&count=`` with the key in the
``X-Subscription-Token`` header; results under ``web.results[]`` with ``title``, ``url``,
``description``) and Tavily (``POST {base}/search`` with JSON ``{"query", "max_results"}``
and ``Authorization: Bearer KEY``; results under ``results[]`` with ``title``, ``url``,
``content``, ``score``). ``base_url`` points a provider elsewhere (a proxy, a local fake
in tests).

The API key is read from an environment variable (``api_key_env``), never taken as an
argument: it then cannot end up in a config file, a run folder or a log. It is sent only in
the request header, never shown by ``repr``, and removed from every error message (a
server that echoes it back in an error body gets ``***``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from agentic_rl.retrieval.base import Document

__all__ = ["PROVIDERS", "BraveSearch", "TavilySearch", "WebSearchError", "make_provider"]

MAX_ERROR_BODY_CHARS = 200
"""An error response's body is quoted up to this many characters."""


class WebSearchError(RuntimeError):
    """A search request failed (timeout, transport error, error status, unreadable answer);
    the message names the provider and never holds the key."""


class _SearchAPI:
    """Shared client: key from the environment, one ``httpx.Client``, scrubbed errors."""

    name = ""
    default_base_url = ""
    default_key_env = ""

    def __init__(self, *, base_url: str | None = None, api_key_env: str | None = None, timeout_s: float = 10.0) -> None:
        import httpx

        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or timeout_s <= 0:
            raise ValueError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
        self.key_env = api_key_env or self.default_key_env
        key = os.environ.get(self.key_env, "").strip()
        if not key:
            raise ValueError(
                f"web search provider {self.name}: the environment variable {self.key_env} is not set (it holds the API key)"
            )
        self._key = key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url: expected an http:// or https:// URL, got {self.base_url!r}")
        self.timeout_s = float(timeout_s)
        self._client = httpx.Client(timeout=self.timeout_s, follow_redirects=False)

    def __repr__(self) -> str:  # the key stays out of logs and tracebacks
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key_env={self.key_env!r})"

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***")

    def _send(self, method: str, url: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._client.request(method, url, **kwargs)
        except httpx.TimeoutException:
            raise WebSearchError(f"the {self.name} search API did not answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise WebSearchError(
                self._scrub(f"the {self.name} search API could not be reached: {type(exc).__name__}: {exc}")
            ) from None
        if response.status_code != 200:
            body = " ".join(response.text.split())[:MAX_ERROR_BODY_CHARS]
            raise WebSearchError(
                self._scrub(f"the {self.name} search API answered HTTP {response.status_code}: {body}")
            )
        try:
            return response.json()
        except ValueError:
            raise WebSearchError(f"the {self.name} search API answered with invalid JSON") from None

    def search(self, query: str, k: int = 5) -> list[Document]:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        payload = self._request(query, k)
        try:
            return self._parse(payload)[:k]
        except (KeyError, TypeError, AttributeError):
            raise WebSearchError(f"the {self.name} search API answered in an unexpected shape") from None

    def search_batch(self, queries: Sequence[str], k: int = 5) -> list[list[Document]]:
        return [self.search(query, k) for query in queries]

    def close(self) -> None:
        self._client.close()

    def _request(self, query: str, k: int) -> Any:
        raise NotImplementedError

    def _parse(self, payload: Any) -> list[Document]:
        raise NotImplementedError


def _document(url: Any, title: Any, text: Any, score: Any = 0.0) -> Document:
    return Document(
        id=str(url or ""), title=str(title or ""), text=" ".join(str(text or "").split()), score=float(score or 0.0)
    )


class BraveSearch(_SearchAPI):
    """The Brave Search web API (key in ``BRAVE_API_KEY`` by default)."""

    name = "brave"
    default_base_url = "https://api.search.brave.com"
    default_key_env = "BRAVE_API_KEY"
    MAX_COUNT = 20  # the API's largest page

    def _request(self, query: str, k: int) -> Any:
        headers = {"Accept": "application/json", "X-Subscription-Token": self._key}
        return self._send(
            "GET",
            f"{self.base_url}/res/v1/web/search",
            params={"q": query, "count": min(k, self.MAX_COUNT)},
            headers=headers,
        )

    def _parse(self, payload: Any) -> list[Document]:
        results = (payload.get("web") or {}).get("results") or []
        return [
            _document(item.get("url"), item.get("title"), item.get("description"))
            for item in results
            if item.get("url")
        ]


class TavilySearch(_SearchAPI):
    """The Tavily search API (key in ``TAVILY_API_KEY`` by default)."""

    name = "tavily"
    default_base_url = "https://api.tavily.com"
    default_key_env = "TAVILY_API_KEY"

    def _request(self, query: str, k: int) -> Any:
        headers = {"Authorization": f"Bearer {self._key}"}
        return self._send("POST", f"{self.base_url}/search", json={"query": query, "max_results": k}, headers=headers)

    def _parse(self, payload: Any) -> list[Document]:
        results = payload.get("results") or []
        return [
            _document(item.get("url"), item.get("title"), item.get("content"), item.get("score"))
            for item in results
            if item.get("url")
        ]


PROVIDERS: dict[str, type[_SearchAPI]] = {"brave": BraveSearch, "tavily": TavilySearch}
"""Search API clients by name."""


def make_provider(
    name: str, *, base_url: str | None = None, api_key_env: str | None = None, timeout_s: float = 10.0
) -> BraveSearch | TavilySearch:
    """The named provider's client; ValueError for an unknown name or a missing key."""
    if name not in PROVIDERS:
        raise ValueError(f"provider: expected one of {', '.join(PROVIDERS)}, got {name!r}")
    return PROVIDERS[name](base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s)  # type: ignore[return-value]

"""Web tools for deep-research agents: ``web_search(query)`` over a search API (Brave,
Tavily, or any retriever) and ``browse(url)``, which opens a page and returns its main
text; both under one domain policy and cached.

:class:`WebConfig` is the ``web`` env option (a mapping of its fields); :func:`web_tools`
gives the process-wide :class:`WebTools` for a config (envs are rebuilt per episode: the
HTTP clients and caches outlive them).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agentic_rl.retrieval.base import Document, Retriever
from agentic_rl.retrieval.cache import CachedRetriever
from agentic_rl.retrieval.web_search import PROVIDERS, make_provider
from agentic_rl.tools.base import Tool, tool
from agentic_rl.tools.browse import PageReader
from agentic_rl.tools.web_policy import DomainPolicy

__all__ = ["WebConfig", "WebTools", "format_results", "web_tools"]

MAX_QUERY_CHARS = 500


@dataclass(frozen=True)
class WebConfig:
    """The ``web`` env option: where ``web_search`` asks and what ``browse`` may open."""

    provider: str = "brave"
    """Search API: ``brave`` or ``tavily``."""
    base_url: str | None = None
    """The API's base URL (default: the provider's public one; a proxy or a local fake otherwise)."""
    api_key_env: str | None = None
    """The environment variable holding the API key (default ``BRAVE_API_KEY`` / ``TAVILY_API_KEY``); keys are never config values."""
    top_k: int = 5
    """Results per search."""
    max_snippet_chars: int = 300
    """Each result's snippet is cut to this many characters."""
    timeout_s: float = 10.0
    """Most seconds a search request, or a whole page download, may take."""
    max_bytes: int = 2_000_000
    """Most bytes downloaded per page; a longer page is read up to there."""
    max_chars: int = 8_000
    """Most characters of page text one ``browse`` result shows."""
    cache_size: int = 1_024
    """Searches and pages kept in memory (each; least recently used go first; 0: no cache)."""
    allow_domains: tuple[str, ...] = ()
    """If not empty, only these domains (and their subdomains) are shown and opened."""
    deny_domains: tuple[str, ...] = ()
    """Domains never shown or opened (e.g. sites that publish the benchmark's answers)."""
    allow_private_addresses: bool = False
    """Allow loopback and private-network hosts (local test servers); off: only public addresses."""

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"web.provider: expected one of {', '.join(PROVIDERS)}, got {self.provider!r}")
        for name in ("top_k", "max_snippet_chars", "max_bytes", "max_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"web.{name}: expected a positive int, got {value!r}")
        if not isinstance(self.cache_size, int) or isinstance(self.cache_size, bool) or self.cache_size < 0:
            raise ValueError(f"web.cache_size: expected an int >= 0, got {self.cache_size!r}")
        if not isinstance(self.timeout_s, (int, float)) or isinstance(self.timeout_s, bool) or self.timeout_s <= 0:
            raise ValueError(f"web.timeout_s: expected a positive number of seconds, got {self.timeout_s!r}")
        for name in ("allow_domains", "deny_domains"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                raise ValueError(f"web.{name}: expected a list of domain names, got {value!r}")
            object.__setattr__(self, name, tuple(value))  # lists from YAML: hashable, for the shared-tools cache

    @classmethod
    def parse(cls, spec: Any) -> WebConfig:
        """A config from the option's value: None (defaults), a provider name, or a mapping."""
        if spec is None:
            return cls()
        if isinstance(spec, WebConfig):
            return spec
        if isinstance(spec, str):
            return cls(provider=spec)
        if isinstance(spec, Mapping):
            known = [item.name for item in fields(cls)]
            unknown = sorted(set(map(str, spec)) - set(known))
            if unknown:
                hint = (
                    "; keys are read from the environment (api_key_env names the variable)"
                    if any("key" in u and u != "api_key_env" for u in unknown)
                    else ""
                )
                raise ValueError(f"web: unknown key {unknown[0]!r}; expected keys: {', '.join(known)}{hint}")
            return cls(**{str(key): value for key, value in spec.items()})
        raise ValueError(f"web: expected a provider name ({', '.join(PROVIDERS)}) or a mapping, got {spec!r}")


def format_results(results: list[Document], *, max_snippet_chars: int | None = 300) -> str:
    """Search results as the model sees them: ``[i] title``, ``URL: ...``, the snippet."""
    if not results:
        return "No results."
    blocks = []
    for rank, doc in enumerate(results, start=1):
        snippet = doc.text
        if max_snippet_chars is not None and len(snippet) > max_snippet_chars:
            snippet = snippet[:max_snippet_chars].rstrip() + "..."
        blocks.append(f"[{rank}] {doc.title or '(no title)'}\nURL: {doc.id}\n{snippet}")
    return "\n\n".join(blocks)


class WebTools:
    """``web_search`` and ``browse`` under one config. ``search``: any retriever whose
    documents have URLs as ids (default: the configured provider's client)."""

    def __init__(self, config: WebConfig | None = None, *, search: Retriever | None = None) -> None:
        self.config = config = config or WebConfig()
        self.policy = DomainPolicy(
            allow_domains=config.allow_domains,
            deny_domains=config.deny_domains,
            allow_private_addresses=config.allow_private_addresses,
        )
        engine = (
            search
            if search is not None
            else make_provider(
                config.provider, base_url=config.base_url, api_key_env=config.api_key_env, timeout_s=config.timeout_s
            )
        )
        self.search_engine: Retriever = (
            CachedRetriever(engine, max_size=config.cache_size) if config.cache_size else engine
        )
        self.reader = PageReader(
            self.policy,
            timeout_s=config.timeout_s,
            max_bytes=config.max_bytes,
            max_chars=config.max_chars,
            cache_size=config.cache_size,
        )
        self.tools: list[Tool] = self._make_tools()

    def search(self, query: str) -> str:
        if not isinstance(query, str) or not query.strip():
            raise ValueError("the query is empty; write what you are looking for")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"the query has {len(query)} characters; a query has at most {MAX_QUERY_CHARS}")
        # Results from denied (or not allowed) domains are never shown: a deny list keeps
        # pages that publish the benchmark's answers out of reach.
        results = [
            doc
            for doc in self.search_engine.search(query.strip(), self.config.top_k)
            if self.policy.url_allowed(doc.id)
        ]
        return format_results(results, max_snippet_chars=self.config.max_snippet_chars)

    def browse(self, url: str) -> str:
        return self.reader.format(self.reader.read(url))

    def _make_tools(self) -> list[Tool]:
        @tool(name="web_search")
        def web_search(query: str) -> str:
            """Search the web; returns the top results as title, URL and snippet.

            Args:
                query: What to look for, e.g. "Vexora Dynamics founder".
            """
            return self.search(query)

        @tool(name="browse")
        def browse(url: str) -> str:
            """Open a web page and return its main text (title, URL, article text).

            Args:
                url: The page's full URL, e.g. one from the web_search results.
            """
            return self.browse(url)

        return [web_search, browse]


_SHARED: dict[WebConfig, WebTools] = {}
_SHARED_LOCK = threading.Lock()


def web_tools(spec: Any = None) -> WebTools:
    """The process-wide :class:`WebTools` for a ``web`` option value (see :meth:`WebConfig.parse`)."""
    config = WebConfig.parse(spec)
    with _SHARED_LOCK:
        if config not in _SHARED:
            _SHARED[config] = WebTools(config)
        return _SHARED[config]

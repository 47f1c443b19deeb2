"""Opening a web page for a model: fetch it (domain policy, timeouts, a byte cap, redirects
checked hop by hop) and extract its main text with trafilatura (the article, not the
navigation, banners and footers), cached by URL.

Each hop connects to an address the policy checked (:class:`~agentic_rl.tools.web_policy.Target`),
never resolving the name again: the request goes to that IP with the URL's own ``Host``
header and, for https, its host name as the TLS server name the certificate must match.
Connections are not kept (one checked address, one request) and no cookies are stored.

Every failure is a :class:`BrowseError` or :class:`~agentic_rl.tools.web_policy.URLRefused`
with a message meant for the model; the ``browse`` tool turns it into an error observation.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urljoin

from agentic_rl.tools.web_policy import DomainPolicy, Target

__all__ = ["BrowseError", "Page", "PageReader", "extract_main_text", "pinned_request"]

_READABLE_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
_REDIRECTS = (301, 302, 303, 307, 308)


class BrowseError(RuntimeError):
    """The page could not be read (timeout, error status, unreadable content)."""


@dataclass(frozen=True)
class Page:
    """A page's extracted text. ``cut_at_bytes``: the download stopped at the byte cap
    (the text is from the page's beginning)."""

    url: str
    title: str
    text: str
    cut_at_bytes: int | None = None


def _trafilatura():
    from agentic_rl.optional import require

    return require("trafilatura", "pip install trafilatura (or agentic-rl[web])", "browse (page text extraction)")


def extract_main_text(html: bytes | str, *, url: str | None = None) -> tuple[str, str]:
    """``(title, main text)`` of an HTML page with trafilatura; a page without a main
    content block (a bare list, a tiny page) gives all its visible text instead."""
    trafilatura = _trafilatura()

    document = trafilatura.bare_extraction(
        html, url=url, with_metadata=True, include_comments=False, include_tables=True, favor_precision=True
    )
    title = (getattr(document, "title", None) or "") if document is not None else ""
    text = (getattr(document, "text", None) or "") if document is not None else ""
    if not text.strip():
        text = trafilatura.html2txt(html) or ""
    return title.strip(), text.strip()


class PageReader:
    """Reads pages for the ``browse`` tool.

    ``timeout_s`` bounds connecting, each read, and the whole download; ``max_bytes`` the
    bytes downloaded per page (a longer page is cut there and read from what arrived);
    ``max_chars`` the characters one result shows; ``cache_size`` the pages kept (LRU, by
    the URL asked for; failures are not cached); ``max_redirects`` the redirects followed,
    each checked by ``policy``. Thread-safe: concurrent episodes share one reader.
    """

    def __init__(
        self,
        policy: DomainPolicy | None = None,
        *,
        timeout_s: float = 10.0,
        max_bytes: int = 2_000_000,
        max_chars: int = 8_000,
        cache_size: int = 1_024,
        max_redirects: int = 5,
        user_agent: str = "agentic-rl-browse/0.1",
    ) -> None:
        import httpx

        _trafilatura()  # missing: fail when the tools are built, not at the first page
        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or timeout_s <= 0:
            raise ValueError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
        for name, value, least in (
            ("max_bytes", max_bytes, 1),
            ("max_chars", max_chars, 1),
            ("cache_size", cache_size, 0),
            ("max_redirects", max_redirects, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name}: expected an int >= {least}, got {value!r}")
        self.policy = policy or DomainPolicy()
        self.timeout_s, self.max_bytes, self.max_chars = float(timeout_s), max_bytes, max_chars
        self.cache_size, self.max_redirects = cache_size, max_redirects
        self._client = httpx.Client(
            timeout=self.timeout_s,
            follow_redirects=False,
            headers={"User-Agent": user_agent},
            limits=httpx.Limits(max_keepalive_connections=0),  # a kept connection would skip the address check
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=())),  # pages read share no state
        )
        self._cache: OrderedDict[str, Page] = OrderedDict()
        self._lock = threading.Lock()
        self.requests = 0
        """HTTP requests sent (redirect hops included)."""
        self.cache_hits = 0

    # ----------------------------------------------------------------- reading

    def read(self, url: str) -> Page:
        """The page at ``url`` (from the cache when read before)."""
        if not isinstance(url, str) or not url.strip():
            raise BrowseError("the URL is empty; pass a full http(s) URL from the search results")
        url = url.strip()
        with self._lock:
            if url in self._cache:
                self._cache.move_to_end(url)
                self.cache_hits += 1
                return self._cache[url]
        page = self._fetch(url)
        if self.cache_size:
            with self._lock:
                self._cache[url] = page
                self._cache.move_to_end(url)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return page

    def format(self, page: Page) -> str:
        """The observation for a page: title, URL, text cut to ``max_chars`` (saying so)."""
        text = page.text or "(the page has no readable text)"
        notes = []
        if len(text) > self.max_chars:
            notes.append(f"[showing the first {self.max_chars} of {len(text)} characters]")
            text = text[: self.max_chars].rstrip()
        if page.cut_at_bytes is not None:
            notes.append(f"[the page is longer than {page.cut_at_bytes} bytes; read up to there]")
        header = f"Title: {page.title}\nURL: {page.url}" if page.title else f"URL: {page.url}"
        return "\n".join([header, "", text, *notes])

    # ----------------------------------------------------------------- fetching

    def _fetch(self, url: str) -> Page:
        import httpx

        deadline = time.monotonic() + self.timeout_s
        target = self.policy.check(url)
        for _ in range(self.max_redirects + 1):
            current = target.url
            try:
                with self._open(target) as response:
                    with self._lock:
                        self.requests += 1
                    if response.status_code in _REDIRECTS and response.headers.get("location"):
                        target = self.policy.check(urljoin(current, response.headers["location"]))
                        continue
                    if response.status_code != 200:
                        raise BrowseError(
                            f"the page answered HTTP {response.status_code} ({response.reason_phrase or 'error'})"
                        )
                    kind = response.headers.get("content-type", "text/html").split(";", 1)[0].strip().lower()
                    if kind not in _READABLE_TYPES:
                        raise BrowseError(f"cannot read {kind} content; only HTML and plain-text pages can be read")
                    body, cut = self._body(response, deadline)
                    encoding = response.encoding or "utf-8"
            except httpx.TimeoutException:
                raise BrowseError(f"the page did not load within {self.timeout_s:g} s") from None
            except httpx.HTTPError as exc:
                raise BrowseError(f"the page could not be fetched: {type(exc).__name__}") from None
            if kind == "text/plain":
                return Page(current, "", body.decode(encoding, errors="replace").strip(), cut)
            title, text = extract_main_text(body, url=current)
            return Page(current, title, text, cut)
        raise BrowseError(f"more than {self.max_redirects} redirects")

    @contextlib.contextmanager
    def _open(self, target: Target) -> Iterator[Any]:
        """The streamed response of a GET of ``target``, from the first of its checked
        addresses that accepts the connection."""
        import httpx

        for index, address in enumerate(target.addresses):
            try:
                response = self._client.send(pinned_request(self._client, target, address), stream=True)
            except httpx.ConnectError:
                if index == len(target.addresses) - 1:
                    raise
                continue
            try:
                yield response
            finally:
                response.close()
            return

    def _body(self, response, deadline: float) -> tuple[bytes, int | None]:
        """At most ``max_bytes`` of the (decoded) body, within the deadline: a server sending
        slowly cannot hold the tool past ``timeout_s``, nor a huge page fill the memory."""
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            if time.monotonic() > deadline:
                raise BrowseError(f"the page did not load within {self.timeout_s:g} s")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_bytes:  # stop downloading: the rest is never read
                return b"".join(chunks)[: self.max_bytes], self.max_bytes
        return b"".join(chunks), None

    def close(self) -> None:
        self._client.close()


def pinned_request(client: Any, target: Target, address: str) -> Any:
    """An ``httpx.Request`` for a GET of ``target.url`` that connects to ``address`` (one of
    ``target.addresses``): the URL's host is swapped for the address after the request is
    built, so its ``Host`` header stays the URL's, and an https request names the URL's
    host (IDNA-encoded) as the TLS server name (SNI and the certificate check)."""
    request = client.build_request("GET", target.url)
    host = request.url.raw_host.decode("ascii")
    request.url = request.url.copy_with(host=address)
    if request.url.scheme == "https" and host != address:
        request.extensions = {**request.extensions, "sni_hostname": host}
    return request

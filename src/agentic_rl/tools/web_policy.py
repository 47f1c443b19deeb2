"""Which URLs the web tools may show and open: http(s) only, a domain allow list and deny
list, and no private or loopback addresses unless allowed.

A domain entry matches the host itself and its subdomains (``example.org`` matches
``en.example.org``, not ``badexample.org``). The deny list wins over the allow list; an
empty allow list allows every domain not denied. Private, loopback, link-local and
reserved addresses (the machine itself, the local network, cloud metadata services) are
refused unless ``allow_private_addresses``: a host name is resolved and refused when any
of its addresses is one (best effort: the HTTP client resolves it again).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["DomainPolicy", "URLRefused"]


class URLRefused(ValueError):
    """The policy does not allow this URL; the message says why (it is shown to the model)."""


def _domains(entries: Iterable[str], field: str) -> tuple[str, ...]:
    if isinstance(entries, str):
        raise ValueError(f"{field}: expected a list of domain names, got the string {entries!r}")
    cleaned = []
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip().strip(".") or "/" in entry or " " in entry.strip():
            raise ValueError(f"{field}: expected domain names like 'example.org', got {entry!r}")
        cleaned.append(entry.strip().strip(".").lower())
    return tuple(cleaned)


def _matches(host: str, domains: tuple[str, ...]) -> str | None:
    return next((d for d in domains if host == d or host.endswith("." + d)), None)


def _is_private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


class DomainPolicy:
    """Allow/deny lists of domains and the private-address rule (see the module docstring)."""

    def __init__(
        self,
        *,
        allow_domains: Iterable[str] = (),
        deny_domains: Iterable[str] = (),
        allow_private_addresses: bool = False,
    ) -> None:
        self.allow_domains = _domains(allow_domains, "allow_domains")
        self.deny_domains = _domains(deny_domains, "deny_domains")
        if not isinstance(allow_private_addresses, bool):
            raise ValueError(f"allow_private_addresses: expected true or false, got {allow_private_addresses!r}")
        self.allow_private_addresses = allow_private_addresses

    def host_allowed(self, host: str) -> bool:
        """Whether the lists allow ``host`` (no address check: for filtering search results)."""
        host = host.lower().rstrip(".")
        if _matches(host, self.deny_domains):
            return False
        return not self.allow_domains or _matches(host, self.allow_domains) is not None

    def url_allowed(self, url: str) -> bool:
        try:
            host = urlsplit(url).hostname
        except ValueError:
            return False
        return bool(host) and urlsplit(url).scheme in ("http", "https") and self.host_allowed(host)  # type: ignore[arg-type]

    def check(self, url: str) -> str:
        """The URL if it may be opened; ``URLRefused`` saying why otherwise."""
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError:
            raise URLRefused(f"{url[:200]!r} is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not host:
            raise URLRefused(f"only http:// and https:// URLs can be opened, got {url[:200]!r}")
        host = host.lower().rstrip(".")
        denied = _matches(host, self.deny_domains)
        if denied:
            raise URLRefused(f"the domain {host} is blocked here (deny list: {denied}); use another source")
        if self.allow_domains and _matches(host, self.allow_domains) is None:
            raise URLRefused(f"the domain {host} is not on the allow list ({', '.join(self.allow_domains)})")
        if not self.allow_private_addresses:
            self._check_address(host)
        return url

    @staticmethod
    def _check_address(host: str) -> None:
        try:
            addresses = [host] if _is_ip(host) else [info[4][0] for info in socket.getaddrinfo(host, None)]
        except OSError:
            raise URLRefused(f"the host {host} could not be resolved") from None
        if any(_is_private(str(address)) for address in addresses):
            raise URLRefused(f"the host {host} is a private or local address; only public web pages can be opened")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True

"""Which URLs the web tools may show and open: http(s) only, a domain allow list and deny
list, and no private or loopback addresses unless allowed.

A domain entry matches the host itself and its subdomains (``example.org`` matches
``en.example.org``, not ``badexample.org``). The deny list wins over the allow list; an
empty allow list allows every domain not denied. Private, loopback, link-local and
reserved addresses (the machine itself, the local network, cloud metadata services, and
the IPv6 forms that carry one: :mod:`agentic_rl.tools.addresses`) are refused unless
``allow_private_addresses``.

:meth:`DomainPolicy.check` resolves the host once and gives the addresses it checked
(:class:`Target`); the caller connects to those, never resolving the name again, so a DNS
answer that changes between the check and the connection (rebinding) cannot reach a
refused address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from agentic_rl.tools import addresses

__all__ = ["DomainPolicy", "Target", "URLRefused"]


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


@dataclass(frozen=True)
class Target:
    """A URL the policy allows, and the addresses its host resolved to when checked (all
    of them allowed): connect to one of these, not to the name."""

    url: str
    host: str
    addresses: tuple[str, ...]


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

    def check(self, url: str) -> Target:
        """The URL and its checked addresses if it may be opened; ``URLRefused`` saying why otherwise."""
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
        return Target(url, host, self._addresses(host))

    def _addresses(self, host: str) -> tuple[str, ...]:
        try:
            # Resolved once, here: the connection goes to these addresses, not to a second answer.
            found = [host.split("%", 1)[0]] if _is_ip(host) else addresses.resolve_host(host)
        except (OSError, UnicodeError):
            raise URLRefused(f"the host {host} could not be resolved") from None
        if not self.allow_private_addresses and not all(addresses.is_public_address(a) for a in found):
            raise URLRefused(f"the host {host} is a private or local address; only public web pages can be opened")
        return tuple(found)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True

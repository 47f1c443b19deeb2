"""Which IP addresses the web tools may connect to, and resolving a host name to them.

An address is public when it is globally reachable unicast: not private, loopback,
link-local, multicast, reserved, unspecified, shared (CGNAT), documentation or
benchmarking space. IPv6 forms that carry an IPv4 address are judged by that address:
IPv4-mapped (``::ffff:a.b.c.d``), NAT64 (``64:ff9b::/96``), 6to4 (``2002::/16``) and
Teredo (``2001::/32``, server and client); the deprecated IPv4-compatible form
(``::a.b.c.d``) and local-use NAT64 (``64:ff9b:1::/48``) are never public. The lists are
explicit, so the answer does not depend on the Python version's ``ipaddress`` tables
(those are consulted too: an address either calls non-public is refused).
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["is_public_address", "resolve_host"]

_IPV4_NOT_PUBLIC = tuple(
    ipaddress.IPv4Network(network)
    for network in (
        "0.0.0.0/8",  # "this network": 0.0.0.0 reaches the machine itself
        "10.0.0.0/8",
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local: cloud metadata services
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
    )
)
_IPV6_NOT_PUBLIC = tuple(
    ipaddress.IPv6Network(network)
    for network in (
        "::/96",  # unspecified, loopback and the deprecated IPv4-compatible form
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001:2::/48",  # benchmarking
        "2001:db8::/32",  # documentation
        "2001:10::/28",  # ORCHID
        "3fff::/20",  # documentation
        "5f00::/16",  # segment routing SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (and would reach), if any."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _NAT64:
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)  # (server, client): the client's address is stored inverted, ipaddress undoes it
    return []


def is_public_address(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether the web tools may connect to ``address`` (see the module docstring). A
    string may carry an IPv6 zone (``fe80::1%eth0``); one that is no IP address is not public."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in network for network in _IPV6_NOT_PUBLIC):
            return False
        embedded = _embedded_ipv4(ip)
        if embedded:
            return all(is_public_address(inner) for inner in embedded)
    elif any(ip in network for network in _IPV4_NOT_PUBLIC):
        return False
    return ip.is_global and not ip.is_multicast and not ip.is_reserved and not ip.is_unspecified


def resolve_host(host: str) -> list[str]:
    """The IP addresses ``host`` resolves to, in the resolver's order, without repeats (an
    IP literal: itself). ``OSError`` when it does not resolve."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise OSError(f"{host} has no addresses")
    return addresses

"""Which addresses the web tools may connect to: every IPv6 form that carries a private,
loopback, link-local or reserved IPv4 address is refused, whatever the form."""

from __future__ import annotations

import ipaddress

import pytest

from agentic_rl.tools.addresses import is_public_address
from agentic_rl.tools.web_policy import DomainPolicy, URLRefused

# IPv4 addresses no web tool may reach, and public ones it may.
NOT_PUBLIC_V4 = [
    "127.0.0.1",
    "127.255.255.254",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",  # cloud metadata
    "100.64.0.1",  # carrier-grade NAT
    "0.0.0.0",
    "0.1.2.3",
    "192.0.0.8",
    "192.0.2.1",
    "198.18.0.1",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
]
PUBLIC_V4 = ["8.8.8.8", "93.184.216.34", "1.1.1.1"]


def teredo(server: str, client: str) -> str:
    """A Teredo address (2001::/32): the server's IPv4, then the client's stored inverted."""
    value = (
        (0x20010000 << 96)
        | (int(ipaddress.IPv4Address(server)) << 64)
        | (0xFFFFFFFF ^ int(ipaddress.IPv4Address(client)))
    )
    return str(ipaddress.IPv6Address(value))


def sixtofour(v4: str) -> str:
    """A 6to4 address (2002::/16) with ``v4`` in bits 16-48."""
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1))


def nat64(v4: str) -> str:
    return str(ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(ipaddress.IPv4Address(v4))))


# Each form that carries an IPv4 address, as a function of it.
FORMS = {
    "ipv4-mapped": lambda v4: f"::ffff:{v4}",
    "ipv4-mapped, hex": lambda v4: (
        str(ipaddress.IPv6Address(f"::ffff:{v4}")).upper().replace("::FFFF:", "0:0:0:0:0:ffff:")
    ),
    "nat64 64:ff9b::/96": nat64,
    "6to4 2002::/16": sixtofour,
    "teredo client": lambda v4: teredo("65.54.227.120", v4),
    "teredo server": lambda v4: teredo(v4, "8.8.4.4"),
}


@pytest.mark.parametrize("v4", NOT_PUBLIC_V4)
def test_private_ipv4_is_refused(v4):
    assert not is_public_address(v4)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("v4", NOT_PUBLIC_V4)
def test_every_ipv6_form_of_a_private_ipv4_is_refused(form, v4):
    address = FORMS[form](v4)
    assert ipaddress.ip_address(address.split("%")[0]).version == 6
    assert not is_public_address(address), address


@pytest.mark.parametrize(
    "address",
    [
        # IPv4-compatible (::a.b.c.d, deprecated) and local-use NAT64: never public, whatever they carry.
        "::127.0.0.1",
        "::10.0.0.1",
        "::8.8.8.8",
        "::",
        "::1",
        "64:ff9b:1::a00:1",
        "64:ff9b:1::808:808",
        # The usual IPv6 ranges.
        "fe80::1",
        "fe80::1%eth0",
        "fc00::1",
        "fd12:3456::1",
        "fec0::1",  # site-local
        "ff02::1",
        "ff0e::1",
        "100::1",  # discard
        "2001:db8::1",
        "2001:2::1",
        "2001:10::1",
        "3fff::1",
        "5f00::1",
        "not an address",
    ],
)
def test_non_public_ipv6_is_refused(address):
    assert not is_public_address(address)


@pytest.mark.parametrize("form", ["ipv4-mapped", "nat64 64:ff9b::/96", "6to4 2002::/16"])
@pytest.mark.parametrize("v4", PUBLIC_V4)
def test_forms_of_a_public_ipv4_stay_allowed(form, v4):
    assert is_public_address(FORMS[form](v4))


@pytest.mark.parametrize("address", [*PUBLIC_V4, "2606:4700:4700::1111", "2a00:1450:4001:82a::200e"])
def test_public_addresses_are_allowed(address):
    assert is_public_address(address)


@pytest.mark.parametrize(
    "url",
    [
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]:8080/",
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",  # NAT64 of 169.254.169.254
        "http://[64:ff9b:1::a00:1]/",
        f"http://[{sixtofour('192.168.0.1')}]/",
        f"http://[{teredo('65.54.227.120', '10.0.0.1')}]/",
        "http://[fe80::1%25eth0]/",
        "http://0.0.0.0/",
        "http://2130706433/",  # 127.0.0.1 as one number: the resolver's answer is checked
        "http://0x7f.1/",
    ],
)
def test_policy_refuses_urls_with_these_addresses(url):
    with pytest.raises(URLRefused, match="is a private or local address|could not be resolved"):
        DomainPolicy().check(url)

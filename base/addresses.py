"""IP addresses and networks read from requests and settings (agent addresses, who may scrape metrics)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_address(text: str) -> Address | None:
    """An IP address (an IPv4-mapped IPv6 one as IPv4; a zone index dropped), or None."""
    try:
        address = ipaddress.ip_address(text.strip().split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def parse_networks(entries: Iterable[str], variable: str) -> tuple[Network, ...]:
    """Networks from addresses or CIDRs ("10.0.0.5", "192.168.0.0/24", "::1"); blanks skipped; a bad entry
    is an ImproperlyConfigured naming the setting and the entry."""
    networks = []
    for entry in (item.strip() for item in entries):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{variable}: {entry!r} is not an IP address or CIDR network.") from None
    return tuple(networks)


def in_networks(address: Address, networks: Iterable[Network]) -> bool:
    return any(address.version == network.version and address in network for network in networks)

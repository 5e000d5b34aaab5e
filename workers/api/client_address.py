"""The address an agent's request comes from, as the platform sees it.

The connecting peer (REMOTE_ADDR) is the agent, unless it is one of our own reverse proxies
(TRUSTED_PROXIES: addresses or networks, e.g. "10.0.0.5,10.1.0.0/16"). Then the agent is the
nearest X-Forwarded-For hop, read from the right, that is not itself a trusted proxy. Nobody
else is believed about X-Forwarded-For: any client can write any address there.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def seen_address(request) -> str | None:
    """The agent's address as a string, or None when the request doesn't tell it reliably."""
    peer = parse_address(request.META.get("REMOTE_ADDR", ""))
    if peer is None:
        return None
    proxies = trusted_proxies(tuple(settings.TRUSTED_PROXIES))
    hops = [hop for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    while _is_trusted(peer, proxies) and hops:
        peer = parse_address(hops.pop())
        if peer is None:  # a trusted proxy passed on something that is not an address
            return None
    return str(peer)


def parse_address(text: str) -> Address | None:
    """An IP address (an IPv4-mapped IPv6 one as IPv4; a zone index dropped), or None."""
    try:
        address = ipaddress.ip_address(text.strip().split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


@lru_cache(maxsize=8)
def trusted_proxies(entries: tuple[str, ...]) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)
    except ValueError as exc:
        raise ImproperlyConfigured(f"TRUSTED_PROXIES: {exc} (give addresses or networks, comma-separated)") from exc


def _is_trusted(address: Address, proxies: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in proxies)

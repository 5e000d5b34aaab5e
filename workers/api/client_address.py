"""The address an agent's request comes from, as the platform sees it.

The connecting peer (REMOTE_ADDR) is the agent, unless it is one of our own reverse proxies
(TRUSTED_PROXIES: addresses or networks, e.g. "10.0.0.5,10.1.0.0/16"). Then the agent is the
nearest X-Forwarded-For hop, read from the right, that is not itself a trusted proxy. Nobody
else is believed about X-Forwarded-For: any client can write any address there.
"""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from base.addresses import Network, in_networks, parse_address, parse_networks

__all__ = ["parse_address", "seen_address", "trusted_proxies"]


def seen_address(request) -> str | None:
    """The agent's address as a string, or None when the request doesn't tell it reliably."""
    peer = parse_address(request.META.get("REMOTE_ADDR", ""))
    if peer is None:
        return None
    proxies = trusted_proxies(tuple(settings.TRUSTED_PROXIES))
    hops = [hop for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    while in_networks(peer, proxies) and hops:
        peer = parse_address(hops.pop())
        if peer is None:  # a trusted proxy passed on something that is not an address
            return None
    return str(peer)


@lru_cache(maxsize=8)
def trusted_proxies(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return parse_networks(entries, "TRUSTED_PROXIES")

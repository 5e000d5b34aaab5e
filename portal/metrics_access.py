"""Who may read /metrics: a bearer token, or an allowed address; with neither configured, only loopback.

METRICS_TOKEN set: `Authorization: Bearer <token>` is let in from anywhere. METRICS_ALLOWED_ADDRESSES
(comma-separated IPs or CIDRs) set: those addresses are let in without a token. Neither set: only
127.0.0.0/8 and ::1. With only a token set, every request needs the token.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Sequence

from django.conf import settings
from django.http import HttpRequest

from base import addresses
from base.addresses import Address, Network, in_networks, parse_address

LOOPBACK: tuple[Network, ...] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def parse_networks(value: str, variable: str = "METRICS_ALLOWED_ADDRESSES") -> tuple[Network, ...]:
    """Networks from "10.0.0.5, 192.168.0.0/24, ::1"; a bad entry is an ImproperlyConfigured naming it."""
    return addresses.parse_networks(value.split(","), variable)


def allowed_networks(configured: Sequence[Network], token: str) -> tuple[Network, ...]:
    """The configured networks; loopback when neither networks nor a token are configured."""
    if configured:
        return tuple(configured)
    return () if token else LOOPBACK


def client_address(request: HttpRequest, trusted_proxies: int) -> Address | None:
    """The connecting address, or behind our proxies the hop they added to X-Forwarded-For; None if unreadable."""
    address = request.META.get("REMOTE_ADDR", "")
    forwarded = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    if trusted_proxies and forwarded:
        address = forwarded[-min(trusted_proxies, len(forwarded))]
    return parse_address(address)


def bearer_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def may_scrape(request: HttpRequest) -> bool:
    """Whether this request may read the metrics (settings METRICS_TOKEN, METRICS_ALLOWED_NETWORKS)."""
    token = settings.METRICS_TOKEN
    if bearer_matches(request, token):
        return True
    address = client_address(request, settings.METRICS_TRUSTED_PROXIES)
    return address is not None and in_networks(address, allowed_networks(settings.METRICS_ALLOWED_NETWORKS, token))

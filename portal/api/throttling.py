"""Throttles that read their rate from the settings on each request (so tests and env can change it).

DRF's own throttles copy the rates once at import; these look them up in REST_FRAMEWORK each time.
A throttled request gets 429 in the API's error format with a Retry-After header.
"""

from __future__ import annotations

from rest_framework import throttling
from rest_framework.settings import api_settings


class LiveRateMixin:
    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)


class UserThrottle(LiveRateMixin, throttling.UserRateThrottle):
    """Per signed-in user (by token); anonymous callers fall back to their IP address."""


class AnonThrottle(LiveRateMixin, throttling.AnonRateThrottle):
    """Per IP address, for requests without a token."""


class ScopedThrottle(LiveRateMixin, throttling.ScopedRateThrottle):
    """Per view scope (e.g. token creation), per user or IP."""

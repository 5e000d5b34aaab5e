"""The API's throttles: a sliding-window count in one Redis round trip, rates read from the settings live.

DRF's own throttles keep each caller's request times as a list in the cache: a GET and a SET of that
list (hundreds of floats, pickled) on every request. These count requests instead, per fixed window
of the rate's period (one pipelined INCR, EXPIRE and GET; portal.cache.count_in_window), and judge by
the sliding-window estimate: the previous window's count weighted by how much of it still overlaps the
last period, plus this window's. A refused request is not counted (as with DRF's). A throttled request
gets 429 in the API's error format with a Retry-After header; while Redis is unavailable every request
is let through (portal.cache fails open). DRF copies the rates once at import; these look them up in
REST_FRAMEWORK each time (so tests and env can change them).
"""

from __future__ import annotations

from rest_framework import throttling
from rest_framework.settings import api_settings

from portal.cache import count_in_window, uncount_in_window


class SlidingWindowThrottle(throttling.SimpleRateThrottle):
    """DRF's SimpleRateThrottle counting as the module says; its subclasses below bring their keys."""

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request, view) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        counted = count_in_window(self.key, self.duration, self.now)
        if counted is None:
            return True
        self.current, self.previous = counted
        self.elapsed = self.now % self.duration
        if self.previous * (1 - self.elapsed / self.duration) + self.current <= self.num_requests:
            return True
        uncount_in_window(self.key, self.duration, self.now)
        self.current -= 1
        return False

    def wait(self) -> float:
        """Seconds until one more request would pass: later in this window, or into the next."""
        room = self.num_requests - self.current - 1  # what the previous window's weight must fall to
        if room >= 0 and self.previous > 0:
            wait = self.duration * (1 - room / self.previous) - self.elapsed
            if wait <= self.duration - self.elapsed:
                return max(wait, 1.0)
        into_next = 0.0
        if self.current >= self.num_requests:  # this window's count, weighted, must fall below the rate
            into_next = self.duration * (1 - (self.num_requests - 1) / self.current)
        return max(self.duration - self.elapsed + into_next, 1.0)


class UserThrottle(throttling.UserRateThrottle, SlidingWindowThrottle):
    """Per signed-in user (by token); anonymous callers fall back to their IP address."""


class AnonThrottle(throttling.AnonRateThrottle, SlidingWindowThrottle):
    """Per IP address, for requests without a token."""


class ScopedThrottle(throttling.ScopedRateThrottle, SlidingWindowThrottle):
    """Per view scope (e.g. token creation), per user or IP."""

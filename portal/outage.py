"""Living through a Redis outage: which errors mean "Redis or the broker is unreachable", and a memory
of the last such error so that a request skips Redis for a few seconds instead of waiting on it again.

Why a memory: with Redis paused, a connection is accepted by the kernel and then nothing answers, so
every command waits its full socket timeout. One request pays that once; the next ones in this
process see the outage and go on without Redis at once (caches and throttles fail open, wake-ups and
task hints are left to the periodic passes that read the database).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import kombu.exceptions
import redis.exceptions
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger("portal.outage")

# Redis-py's errors (connection refused, timeouts, a server still loading its data), the broker's
# (kombu wraps the transport's connection errors in OperationalError) and plain socket errors.
UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, kombu.exceptions.OperationalError)
UNAVAILABLE_OR_OS = (*UNAVAILABLE, OSError)
RETRY_AFTER_S = 5


class Outage:
    """Per process: `down()` is true for `cooldown_s` after `failed()`; logs once per outage."""

    def __init__(self, what: str, cooldown_s: float = RETRY_AFTER_S) -> None:
        self.what, self.cooldown_s = what, cooldown_s
        self._until = 0.0
        self._lock = threading.Lock()

    def down(self) -> bool:
        return time.monotonic() < self._until

    def failed(self, error: BaseException) -> None:
        """Remember the failure; the first one of an outage is logged as a warning."""
        with self._lock:
            first = not self.down()
            self._until = time.monotonic() + self.cooldown_s
        if first:
            logger.warning(
                "%s unavailable (%s: %s); going on without it for %gs",
                self.what,
                type(error).__name__,
                error,
                self.cooldown_s,
            )

    def reset(self) -> None:
        """Forget the outage (tests; a caller that saw the service answer again)."""
        self._until = 0.0


CACHE = Outage("Redis cache")
BROKER = Outage("Celery broker")


def unavailable_response(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: the API's JSON error format under /api/, a short page elsewhere."""
    message = "A backing service (Redis) is unavailable for a moment; please retry shortly."
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": message}, status=503)
    else:
        page = f"<!doctype html><title>Try again shortly</title><h1>Try again shortly</h1><p>{message}</p>"
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


class ServiceUnavailableMiddleware:
    """A view that still needed Redis or the broker during an outage answers 503, not an HTML 500.

    Caches, throttles, wake-ups and task hints already go on without Redis; this is the net under
    whatever else does, API and pages alike (DRF hands exceptions it doesn't know on to here).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, UNAVAILABLE):
            return None
        logger.warning("%s %s: %s during a Redis outage: 503", request.method, request.path, type(exception).__name__)
        return unavailable_response(request)

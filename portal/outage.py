"""The site's answer while Redis or the broker is away: a 503 with Retry-After, never an HTML 500.

What an outage is, and the per-process memory of one, live in base.outage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from base.outage import RETRY_AFTER_S, UNAVAILABLE

logger = logging.getLogger("portal.outage")


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

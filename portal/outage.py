"""The site's answer while Redis, the broker or PostgreSQL is away: a 503 with Retry-After, never an HTML 500.

What an outage is, and the per-process memory of one, live in base.outage. Two nets catch it: the
middleware below for an error raised in a view (DRF hands on exceptions it doesn't know), and the
500 handler (`server_error`, handler500 in portal.urls) for one raised in another middleware (the
session and authentication middlewares read the database before any view runs).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from base.outage import DATABASE_UNAVAILABLE, RETRY_AFTER_S, UNAVAILABLE, UNAVAILABLE_CODE, note_database_error

logger = logging.getLogger("portal.outage")

WHAT = {"redis": "A backing service (Redis)", "database": "The database"}


def unavailable_response(request: HttpRequest, what: str = "redis") -> HttpResponse:
    """503 with Retry-After: the API's JSON error format under /api/, a short page elsewhere."""
    message = f"{WHAT[what]} is unavailable for a moment; please retry shortly."
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": message, "code": UNAVAILABLE_CODE}, status=503)
    else:
        page = f"<!doctype html><title>Try again shortly</title><h1>Try again shortly</h1><p>{message}</p>"
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def outage_of(exception: BaseException | None) -> str | None:
    """Which backing service the exception says is away ("redis", "database"), or None for anything else."""
    if isinstance(exception, UNAVAILABLE):
        return "redis"
    if isinstance(exception, DATABASE_UNAVAILABLE):
        note_database_error(exception)
        return "database"
    return None


def answer_outage(request: HttpRequest, exception: BaseException | None) -> HttpResponse | None:
    what = outage_of(exception)
    if what is None:
        return None
    logger.warning("%s %s: %s during a %s outage: 503", request.method, request.path, type(exception).__name__, what)
    return unavailable_response(request, what)


class ServiceUnavailableMiddleware:
    """A view that still needed Redis, the broker or the database during an outage answers 503, not a 500.

    Caches, throttles, wake-ups and task hints already go on without Redis; this is the net under
    whatever else does, API and pages alike (DRF hands exceptions it doesn't know on to here).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return answer_outage(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an outage met outside a view (in a middleware) is a 503 too; anything else, Django's 500.

    Django calls it while handling the exception, so sys.exc_info() holds it.
    """
    return answer_outage(request, sys.exc_info()[1]) or defaults.server_error(request)

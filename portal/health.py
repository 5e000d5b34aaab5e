"""Liveness and readiness for load balancers and orchestrators: /healthz and /readyz.

/healthz answers 200 as long as this process serves requests; it touches no store. /readyz says
whether *this* instance can serve: its database and its storage (django-health-check plugins, at
once, each within its timeout); 200 when both pass, else 503, with a JSON body naming each check.
Redis, beat and the meter are shared by every instance: a stalled beat would fail every instance's
probe at once and empty the load balancer, so they are reported by /metrics (portal.metrics) instead.

A failure names the check and the error's type only: messages of database drivers and storage
clients carry hosts, ports, bucket URLs and folder paths, which an unauthenticated probe must not
show. The full error goes to the log.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import logging
from typing import Any

from django.db import Error as DatabaseDriverError
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import add_never_cache_headers, patch_vary_headers
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.http import require_GET
from health_check.base import HealthCheck
from health_check.checks import Database
from health_check.exceptions import ServiceUnavailable
from health_check.views import HealthCheckView

logger = logging.getLogger(__name__)

CHECK_TIMEOUT = datetime.timedelta(seconds=3)


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Alive: this process answers. No database, Redis or storage is touched."""
    response = JsonResponse({"status": "ok"})
    add_never_cache_headers(response)
    return response


def unavailable(what: str, error: BaseException) -> ServiceUnavailable:
    """The probe's answer names the error's type only; its message (hosts, paths) goes to the log."""
    logger.warning("readiness: %s (%s: %s)", what, type(error).__name__, error)
    return ServiceUnavailable(f"{what} ({type(error).__name__})")


class ReadyDatabase(Database):
    """`SELECT 1` on a fresh connection (django-health-check's check, within our timeout)."""

    timeout = CHECK_TIMEOUT

    def run(self) -> None:
        try:
            super().run()
        except ServiceUnavailable as error:
            # The library's message is the driver's text up to its first colon: it can name the server.
            raise unavailable("the database did not answer", error.__cause__ or error) from error
        except DatabaseDriverError as error:
            raise unavailable("the database did not answer", error) from error


@dataclasses.dataclass
class PlatformStorage(HealthCheck):
    """The platform's object storage (datasets, models, checkpoints) answers a ping."""

    timeout = CHECK_TIMEOUT

    def run(self) -> None:
        try:
            from workers.services.storage import platform_store

            platform_store().ping()
        except Exception as error:  # any failure to reach or use the store: its type says which
            raise unavailable("storage ping failed", error) from error


def readiness_checks() -> dict[str, tuple[type[HealthCheck], dict[str, Any]]]:
    """Name -> (check, options): what this instance needs of its own to take traffic."""
    return {"database": (ReadyDatabase, {}), "storage": (PlatformStorage, {})}


class ReadinessView(HealthCheckView):
    """Every readiness check at once: 200 {"status": "ok", ...} or 503 {"status": "unavailable", "failed": [...]}."""

    http_method_names = ["get"]

    @method_decorator(transaction.non_atomic_requests)
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = View.dispatch(self, request, *args, **kwargs)
        patch_vary_headers(response, ["Accept"])
        add_never_cache_headers(response)
        return response

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """Synchronous on purpose: the checks run on an event loop of their own in a helper thread, so the
        view works the same under WSGI and where the calling thread already runs a loop (an async test
        client, a browser driver in tests): django-health-check's own view is async."""
        named = readiness_checks()
        self.checks = list(named.values())
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as runner:
            results = runner.submit(asyncio.run, self._results()).result()
        errors = {name: result.error for name, result in zip(named, results, strict=True)}
        outcome = {name: str(error) if error else "ok" for name, error in errors.items()}
        failed = [name for name, error in errors.items() if error]
        body = {"status": "unavailable" if failed else "ok", "checks": outcome, "failed": failed}
        return JsonResponse(body, status=503 if failed else 200)

    async def _results(self) -> list:
        with self.get_executor() as executor:
            return await asyncio.gather(*(check.get_result(executor) for check in self.get_checks()))

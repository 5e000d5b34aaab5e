"""Liveness and readiness for load balancers and orchestrators: /healthz and /readyz.

/healthz answers 200 as long as this process serves requests; it touches no store. /readyz runs the
checks below (django-health-check plugins, all at once, each within its timeout) and answers 200
when every one passes, else 503; either way a JSON body names each check and what failed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
from typing import Any

import redis.asyncio
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import add_never_cache_headers, patch_vary_headers
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.http import require_GET
from health_check.base import HealthCheck
from health_check.checks import Database
from health_check.contrib.redis import Redis
from health_check.exceptions import ServiceUnavailable
from health_check.views import HealthCheckView

from base import heartbeats

CHECK_TIMEOUT = datetime.timedelta(seconds=3)


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Alive: this process answers. No database, Redis or storage is touched."""
    response = JsonResponse({"status": "ok"})
    add_never_cache_headers(response)
    return response


class ReadyDatabase(Database):
    """`SELECT 1` on a fresh connection (django-health-check's check, within our timeout)."""

    timeout = CHECK_TIMEOUT


class ReadyRedis(Redis):
    """`PING` to REDIS_URL (django-health-check's check, within our timeout)."""

    timeout = CHECK_TIMEOUT


@dataclasses.dataclass
class PlatformStorage(HealthCheck):
    """The platform's object storage (datasets, models, checkpoints) answers a ping."""

    timeout = CHECK_TIMEOUT

    def run(self) -> None:
        try:
            from workers.services.storage import platform_store

            platform_store().ping()
        except Exception as error:  # any failure to reach or use the store: its type says which
            raise ServiceUnavailable(f"storage ping failed ({type(error).__name__}: {error})"[:300]) from error


@dataclasses.dataclass
class RecentHeartbeat(HealthCheck):
    """A periodic process marked its heartbeat (base.heartbeats) within `within_s` seconds."""

    name: str = ""
    within_s: float = 0.0
    what: str = dataclasses.field(default="", repr=False)
    timeout = CHECK_TIMEOUT

    def run(self) -> None:
        beat = heartbeats.last(self.name)
        if beat is None:
            raise ServiceUnavailable(f"{self.what}: no run recorded")
        age = beat.age_seconds()
        if age > self.within_s:
            raise ServiceUnavailable(f"{self.what}: last ran {age:.0f} s ago (more than {self.within_s:g} s)")


def redis_client() -> redis.asyncio.Redis:
    timeout = settings.REDIS_SOCKET_TIMEOUT_S
    return redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)


def readiness_checks() -> dict[str, tuple[type[HealthCheck], dict[str, Any]]]:
    """Name -> (check, options): what must work for this instance to take traffic."""
    return {
        "database": (ReadyDatabase, {}),
        "redis": (ReadyRedis, {"client_factory": redis_client}),
        "storage": (PlatformStorage, {}),
        "beat": (RecentHeartbeat, {"name": "beat", "within_s": settings.READY_BEAT_WITHIN_S, "what": "Celery beat"}),
        "meter": (RecentHeartbeat, {"name": "meter", "within_s": settings.READY_METER_WITHIN_S, "what": "meter"}),
    }


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

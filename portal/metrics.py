"""Prometheus /metrics: django-prometheus's request and database metrics, and the platform's own gauges.

The platform gauges are computed at scrape time by `PlatformCollector`, a handful of grouped
queries whatever the size of the fleet. Money is in currency units (not micro-units). Who may scrape
is decided by portal.metrics_access.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import redis
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Exists, Min, OuterRef, Q, Subquery, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric

from base import heartbeats
from billing.models import BillingLine, SpotPrice
from fleet.choices import AgentStatus, AllocationMode, JobStatus
from fleet.models import Allocation, ChipType, Job, Node
from kernel.money import MICROS_PER_UNIT
from portal.metrics_access import may_scrape

logger = logging.getLogger(__name__)

CONNECTED = (AgentStatus.ONLINE, AgentStatus.DRAINING)  # an agent polling for work


class PlatformCollector:
    """The business gauges, read from the database and the heartbeats when Prometheus scrapes."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("starverse_platform_metrics_up", "1 when the platform gauges below could be read.")
        try:
            gauges = list(self.platform_gauges())
        except DatabaseError as error:
            logger.warning("metrics: platform gauges unavailable (%s)", type(error).__name__)
            gauges = []
        up.add_metric([], 1 if gauges else 0)
        yield up
        yield from gauges
        yield from self.heartbeat_gauges()
        yield self.redis_up()

    def platform_gauges(self) -> Iterator[Metric]:
        now = timezone.now()
        yield self.jobs_by_status()
        yield from self.chips(now)
        yield from self.nodes()
        yield self.meter_lag(now)
        yield self.clearing_prices()

    def jobs_by_status(self) -> Metric:
        family = GaugeMetricFamily("starverse_jobs", "Jobs in each status.", labels=["status"])
        counts = dict(Job.objects.order_by().values_list("status").annotate(n=Count("pk")))
        for status in JobStatus.values:
            family.add_metric([status], counts.get(status, 0))
        return family

    def chips(self, now) -> Iterator[Metric]:
        """Allocated chips by chip type and mode; free chips on online nodes, by chip type and the mode they serve."""
        slugs = dict(ChipType.objects.values_list("pk", "slug"))
        allocated = GaugeMetricFamily(
            "starverse_chips_allocated", "Chips held by open allocations.", labels=["chip_type", "mode"]
        )
        rows = Allocation.objects.open().order_by().values("chip_type_id", "mode").annotate(chips=Sum("chips"))
        held = {(row["chip_type_id"], row["mode"]): row["chips"] for row in rows}
        for chip_type_id, slug in sorted(slugs.items(), key=lambda item: item[1]):
            for mode in AllocationMode.values:
                allocated.add_metric([slug, mode], held.get((chip_type_id, mode), 0))
        yield allocated

        free = GaugeMetricFamily(
            "starverse_chips_free",
            "Chips of online nodes nothing holds; mode spot: on spot-eligible nodes (which take on-demand work too).",
            labels=["chip_type", "mode"],
        )
        online = Node.objects.filter(agent_status=AgentStatus.ONLINE).order_by()
        totals = online.values("pool__chip_type_id", "spot_eligible").annotate(chips=Sum("chips"))
        used = (
            Allocation.objects.holding(now)
            .filter(node__agent_status=AgentStatus.ONLINE)
            .order_by()
            .values("node__pool__chip_type_id", "node__spot_eligible")
            .annotate(chips=Sum("chips"))
        )
        busy = {(row["node__pool__chip_type_id"], row["node__spot_eligible"]): row["chips"] for row in used}
        capacity = {(row["pool__chip_type_id"], row["spot_eligible"]): row["chips"] for row in totals}
        for chip_type_id, slug in sorted(slugs.items(), key=lambda item: item[1]):
            for mode, spot in ((AllocationMode.ON_DEMAND, False), (AllocationMode.SPOT, True)):
                key = (chip_type_id, spot)
                free.add_metric([slug, mode], max(0, capacity.get(key, 0) - busy.get(key, 0)))
        yield free

    def nodes(self) -> Iterator[Metric]:
        counts = dict(Node.objects.order_by().values_list("agent_status").annotate(n=Count("pk")))
        by_status = GaugeMetricFamily("starverse_nodes", "Nodes in each agent status.", labels=["status"])
        for status in AgentStatus.values:
            by_status.add_metric([status], counts.get(status, 0))
        yield by_status
        connected = GaugeMetricFamily("starverse_agents_connected", "Node agents polling for work: online or draining.")
        connected.add_metric([], sum(counts.get(status, 0) for status in CONNECTED))
        yield connected

    def meter_lag(self, now) -> Metric:
        family = GaugeMetricFamily(
            "starverse_meter_lag_seconds", "How far behind now the oldest open allocation is billed (0: none open)."
        )
        # An open allocation is billed with its billing line (job, chip type, mode).
        open_lines = Allocation.objects.open().filter(
            job=OuterRef("job"), chip_type=OuterRef("chip_type"), mode=OuterRef("mode")
        )
        oldest = BillingLine.objects.filter(Exists(open_lines)).aggregate(oldest=Min("billed_through"))["oldest"]
        family.add_metric([], max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
        return family

    def clearing_prices(self) -> Metric:
        family = GaugeMetricFamily(
            "starverse_spot_clearing_price",
            "The latest spot clearing price per chip-hour, in currency units.",
            labels=["chip_type"],
        )
        latest = SpotPrice.objects.filter(chip_type=OuterRef("pk")).order_by("-at", "-id").values("price_per_hour")
        rows = ChipType.objects.annotate(price=Subquery(latest[:1])).filter(~Q(price=None)).order_by("slug")
        for slug, price in rows.values_list("slug", "price"):
            family.add_metric([slug], price / MICROS_PER_UNIT)
        return family

    def redis_up(self) -> Metric:
        """Redis is shared by every instance, so it is watched here and alerted on, not a readiness check."""
        family = GaugeMetricFamily("starverse_redis_up", "1 when Redis (REDIS_URL) answered a PING, else 0.")
        timeout = settings.REDIS_SOCKET_TIMEOUT_S
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            answered = bool(client.ping())
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as error:
            logger.warning("metrics: Redis unavailable (%s)", type(error).__name__)
            answered = False
        finally:
            client.close()
        family.add_metric([], 1 if answered else 0)
        return family

    def heartbeat_gauges(self) -> Iterator[Metric]:
        now = timezone.now()
        for name, help_text in (
            ("beat", "Seconds since Celery beat last published a task."),
            ("meter", "Seconds since the meter last finished a run."),
            ("ledger_audit", "Seconds since the ledger audit last ran."),
        ):
            beat = heartbeats.last(name)
            if beat is not None:
                age = GaugeMetricFamily(f"starverse_{name}_last_run_age_seconds", help_text)
                age.add_metric([], beat.age_seconds(now))
                yield age
        audit = heartbeats.last("ledger_audit")
        if audit is not None and "problems" in audit.facts:
            problems = GaugeMetricFamily(
                "starverse_ledger_audit_problems", "Problems the last ledger audit found (0: the ledger balances)."
            )
            problems.add_metric([], audit.facts["problems"])
            yield problems


def exposition() -> bytes:
    """The text Prometheus reads: this process's (or, in multiprocess mode, every worker's) metrics, then ours."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    platform = CollectorRegistry(auto_describe=False)
    platform.register(PlatformCollector())
    return generate_latest(registry) + generate_latest(platform)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """GET /metrics for Prometheus; 403 for anyone metrics_access does not let in."""
    if not may_scrape(request):
        return HttpResponse(
            "Forbidden: metrics need the bearer token or an allowed address.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)

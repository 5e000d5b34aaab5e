"""When a queued job is planned again: backoff after each failed planning, sooner when capacity changes.

Planning a job costs tens of milliseconds; re-planning every waiting job on every pass let a user's
flood of unplaceable jobs saturate the worker. A job that can't be placed waits PLAN_BACKOFF_MIN_S,
then twice as long after each further try, up to PLAN_BACKOFF_MAX_S; when chips free up (an
allocation ends, leaving ranks let go of their chips) or a node comes online, every waiting job is
due again at once, since only then can its answer change.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node

FLEET_KEY = "planning:online-fleet"


def backoff_seconds(attempts: int) -> int:
    """The wait after `attempts` failed plannings in a row (1, 2, ...)."""
    return min(settings.PLAN_BACKOFF_MAX_S, settings.PLAN_BACKOFF_MIN_S * 2 ** max(attempts - 1, 0))


def next_plan_time(attempts: int, now: datetime) -> datetime:
    return now + timedelta(seconds=backoff_seconds(attempts))


def due_jobs(now: datetime):
    """Queued jobs whose backoff is over, oldest first."""
    return (
        Job.objects.filter(status=JobStatus.QUEUED, cancel_requested_at__isnull=True)
        .filter(Q(next_plan_at__isnull=True) | Q(next_plan_at__lte=now))
        .order_by("created_at", "pk")
    )


def wake_waiting_jobs(now: datetime | None = None) -> int:
    """Capacity changed: every waiting job is due at the next planning pass (one UPDATE, no planning here)."""
    now = now or timezone.now()
    return Job.objects.filter(status=JobStatus.QUEUED, next_plan_at__gt=now).update(next_plan_at=now)


def plan_at_next_pass(job_ids: list[int], now: datetime) -> int:
    """These waiting jobs are due at the next planning pass, whatever their backoff."""
    return Job.objects.filter(pk__in=job_ids, status=JobStatus.QUEUED, next_plan_at__gt=now).update(next_plan_at=now)


def wake_on_fleet_change(now: datetime | None = None) -> bool:
    """A node came online (enrolled, back from lost, no longer draining) or changed its chips: wake.

    The planning pass compares the online fleet with what it saw last time (kept in the cache), so
    enrollment and heartbeats need no hook of their own. Without the cache, it wakes every time.
    """
    online = Node.objects.filter(agent_status=AgentStatus.ONLINE).order_by("pk").values_list("pk", "chips")
    seen = hashlib.sha256(repr(list(online)).encode()).hexdigest()
    # The cache fails open (an outage reads as empty): then it wakes, costing a planning pass, never missing one.
    changed = cache.get(FLEET_KEY) != seen
    if changed:
        cache.set(FLEET_KEY, seen, timeout=None)
        wake_waiting_jobs(now)
    return changed

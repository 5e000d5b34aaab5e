"""The reconciler: a short, idempotent pass over jobs and nodes that Celery beat runs every few seconds."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.services.holds import credit_stops
from fleet.choices import JobStatus
from fleet.models import Job, Node
from workers.models import RankExit
from workers.services import lifecycle, node_lifecycle
from workers.services.lifecycle.islands import departed_ranks
from workers.services.migration import overdue_notices
from workers.services.reports import crash_reason

logger = logging.getLogger(__name__)


def reconcile(now=None) -> dict[str, int]:
    """One pass; each step is safe to run twice or concurrently (rows are locked and re-read)."""
    now = now or timezone.now()
    return {
        "lost_nodes": migrate_jobs_off_silent_nodes(now),
        "notices_over": sum(lifecycle.resume(job_id, now=now) for job_id in overdue_notices(now)),
        "crashed": fail_jobs_with_crashed_ranks(now),
        "stuck": fail_stuck_provisioning(now),
        "stopped": lifecycle.finish_overdue_stops(now),
        "credit_stops": stop_jobs_out_of_credit(now),
        "requeued": lifecycle.requeue_abandoned_planning(now),
    }  # planning waiting jobs is a pass of its own, on the planning queue (scheduling.schedule_waiting_jobs)


def stop_jobs_out_of_credit(now) -> int:
    """Billing names the jobs whose money or budget runs out within the stop margin; they stop here.

    Re-derived on every pass from the balances and open allocations, so a stop that a crashed
    process never carried out (a lost `credit_shortfall` signal) happens on the next pass.
    """
    return sum(
        lifecycle.stop_for_credit(stop.job_id, stop.reason, data=stop.data, now=now) for stop in credit_stops(now)
    )


def migrate_jobs_off_silent_nodes(now) -> int:
    """A node silent past the heartbeat deadline is lost; its jobs resume elsewhere from their last checkpoint."""
    return sum(node_lifecycle.declare_lost_if_silent(node.pk, now) for node in node_lifecycle.silent_nodes(now))


def fail_jobs_with_crashed_ranks(now) -> int:
    """A rank exited with an error and every node of the job has polled since: a real crash, so the job fails."""
    count = 0
    crashed = RankExit.objects.filter(
        job__status__in=[JobStatus.PROVISIONING, JobStatus.RUNNING], epoch=F("job__epoch")
    ).exclude(code=0)
    for job_id in set(crashed.values_list("job_id", flat=True)):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            exits = RankExit.objects.filter(job=job, epoch=job.epoch).exclude(code=0)
            first = exits.exclude(rank__in=departed_ranks(job)).order_by("created_at", "pk").first()
            if job.status not in (JobStatus.PROVISIONING, JobStatus.RUNNING) or first is None:
                continue
            nodes = Node.objects.filter(allocations__job=job, allocations__ended_at__isnull=True).distinct()
            if all(node.last_heartbeat_at and node.last_heartbeat_at > first.created_at for node in nodes):
                lifecycle.fail(job, crash_reason(first), now=now)
                count += 1
    return count


def fail_stuck_provisioning(now) -> int:
    deadline = now - timedelta(seconds=settings.JOB_PROVISIONING_TIMEOUT_S)
    count = 0
    for job in Job.objects.filter(status=JobStatus.PROVISIONING, updated_at__lt=deadline):
        with transaction.atomic():
            timeout = settings.JOB_PROVISIONING_TIMEOUT_S
            reason = StoredText(gettext_noop("The ranks did not start within %(seconds)ss."), seconds=timeout)
            lifecycle.fail(job, reason, now=now)
            count += 1
    return count

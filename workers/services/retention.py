"""Retention: a finished job's log lines and per-step metrics are deleted once it ended longer ago than
the operator's `OperatorSettings.telemetry_retention_days`.

They are by far the largest tables (a line per rank and step), and nothing reads them after a job
has ended but its page's charts and log tail: the job's summary (status, steps, loss, cost), its
timeline, checkpoints and billing stay. A job still running keeps every row whatever its age: its
progress, projections and the speed folded into quotes when it ends read them. The beat runs the
pass (`prune-job-telemetry`); rows go in small batches, each its own short transaction, so a pass
never holds a long lock or a huge transaction, and a pass stopped halfway leaves the next one less.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from celery import shared_task
from django.db.models import Exists, Model, OuterRef
from django.utils import timezone

from billing.models import OperatorSettings
from fleet.models import Job
from workers.models import JobLogLine, JobMetric

BATCH = 5000
PRUNED = {"log_lines": JobLogLine, "metrics": JobMetric}


def prune_job_telemetry(now: datetime | None = None, batch: int = BATCH, budget_s: float = 60.0) -> dict[str, int]:
    """One pass: rows deleted per kind; stops after `budget_s` (the next pass carries on)."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=OperatorSettings.load().telemetry_retention_days)
    deadline = time.monotonic() + budget_s
    deleted = dict.fromkeys(PRUNED, 0)
    for job_id in jobs_ended_before(cutoff):
        for kind, model in PRUNED.items():
            deleted[kind] += _delete_rows(model, job_id, batch, deadline)
        if time.monotonic() >= deadline:
            break
    return deleted


def jobs_ended_before(cutoff: datetime) -> list[int]:
    """Jobs that ended before `cutoff` and still have rows to prune (the probes use the job foreign keys' indexes)."""
    has_rows = Exists(JobLogLine.objects.filter(job=OuterRef("pk"))) | Exists(
        JobMetric.objects.filter(job=OuterRef("pk"))
    )
    ended = Job.objects.filter(finished_at__lt=cutoff).filter(has_rows).order_by("pk")
    return list(ended.values_list("pk", flat=True))


def _delete_rows(model: type[Model], job_id: int, batch: int, deadline: float) -> int:
    total = 0
    while True:
        ids = model.objects.filter(job_id=job_id).order_by().values("pk")[:batch]
        count, _ = model.objects.filter(pk__in=ids).delete()
        total += count
        if count < batch or time.monotonic() >= deadline:
            return total


@shared_task(name="workers.tasks.prune_job_telemetry", ignore_result=True, soft_time_limit=150)
def prune_job_telemetry_task() -> dict[str, int]:
    """The beat's retention pass (TELEMETRY_PRUNE_SECONDS)."""
    return prune_job_telemetry()

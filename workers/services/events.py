"""Recording what happened to a job, for its timeline."""

from __future__ import annotations

from django.utils import timezone

from workers.models import Job, JobEvent


def record_event(job: Job, kind: str, message: str = "", *, data: dict | None = None, now=None) -> JobEvent:
    return JobEvent.objects.create(
        job=job,
        kind=kind,
        message=message,
        data=data or {},
        epoch=job.epoch,
        created_at=now or timezone.now(),
    )

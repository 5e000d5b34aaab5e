"""A job's life from the user's side: submit, cancel, and how it ends."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from market.services.bids import close_job_bids
from workers.choices import JobEventKind, JobStatus
from workers.models import Job, MigrationStatus
from workers.protocol import CommandType
from workers.services.events import record_event
from workers.services.placement import release, send_to_nodes


def submit_job(owner, **fields) -> Job:
    """Queue a validated job; planning happens in a Celery task after the commit."""
    from workers.tasks import schedule_job

    with transaction.atomic():
        job = Job.objects.create(owner=owner, status=JobStatus.QUEUED, **fields)
        record_event(job, JobEventKind.QUEUED, "Queued")
        schedule_job.delay_on_commit(job.pk)
    return job


def cancel_job(job: Job, now=None) -> Job:
    """Cancel at any time: a queued job ends at once; a running one is told to stop."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.is_finished or job.cancel_requested_at:
            return job
        job.cancel_requested_at = now
        job.save(update_fields=["cancel_requested_at", "updated_at"])
        record_event(job, JobEventKind.CANCEL_REQUESTED, "Cancel requested", now=now)
        if job.status in {JobStatus.QUEUED, JobStatus.PLANNING}:
            reason = (
                "Cancelled while moving to other chips" if job.migrations.exists() else "Cancelled before it started"
            )
            return finish_job(job, JobStatus.CANCELLED, reason, now=now)
        if job.status == JobStatus.MIGRATING:  # its chips are already released; the leaving ranks are fenced
            send_to_nodes(job, CommandType.STOP, {"reason": "cancelled", "checkpoint": False}, now=now)
            return finish_job(job, JobStatus.CANCELLED, "Cancelled while moving to other chips", now=now)
        job.status = JobStatus.STOPPING
        job.save(update_fields=["status", "updated_at"])
        send_to_nodes(job, CommandType.STOP, {"reason": "cancelled", "checkpoint": False}, now=now)
    return job


def finish_job(job: Job, status: str, reason: str = "", now=None) -> Job:
    """End a job once: set its final status, free its chips, and note why. Call inside a transaction."""
    now = now or timezone.now()
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.is_finished:
        return job
    job.status = status
    job.status_reason = reason
    job.finished_at = now
    job.save(update_fields=["status", "status_reason", "finished_at", "updated_at"])
    if status == JobStatus.FAILED:
        send_to_nodes(job, CommandType.STOP, {"reason": reason[:200], "checkpoint": False, "grace_s": 5}, now=now)
    # Bids before allocations: ending its bids charges reserved chips (bid rows, then wallets, as a
    # clearing locks them); release's final charge then locks allocations and wallets.
    close_job_bids(job, now)
    release(job, now=now)
    job.migrations.exclude(status__in=[MigrationStatus.RESUMED, MigrationStatus.ABANDONED]).update(
        status=MigrationStatus.ABANDONED
    )
    kind = {
        JobStatus.SUCCEEDED: JobEventKind.SUCCEEDED,
        JobStatus.FAILED: JobEventKind.FAILED,
    }.get(status, JobEventKind.STOPPED)
    record_event(job, kind, reason or job.get_status_display(), now=now)
    return job

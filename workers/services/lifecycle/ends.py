"""How a job stops and ends: cancelled, stopped for credit, finished (the one way a job ends), failed, fenced.

Obligations: a new way for a job to end must go through `finish` (it closes bids, ends allocations and
abandons moves); a new way to stop ranks must use `stop_ranks`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.notifications import credit_stop_requested as credit_stop_requested_email
from billing.notifications import job_ended
from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from kernel.protocol import CommandType
from market.services.bids import close_job_bids
from workers.models import JobEvent
from workers.services import allocations, commands, migration
from workers.services.events import record_event
from workers.services.lifecycle.starts import WAITING

logger = logging.getLogger(__name__)

CANCELLED_MOVING = StoredText(gettext_noop("Cancelled while moving to other chips"))
CANCELLED_BEFORE_START = StoredText(gettext_noop("Cancelled before it started"))
NO_CREDIT = "no_credit"  # marks the notice event of a credit stop (its `data["stop"]`)
STOPPABLE = {JobStatus.PROVISIONING, JobStatus.RUNNING, JobStatus.MIGRATING}


def stop_ranks(
    job: Job,
    reason: str | StoredText,
    *,
    checkpoint: bool,
    grace_s: int | None = None,
    now: datetime,
    node_ids: list[int] | None = None,
) -> list[int]:
    """The one STOP command: every node holding the job's chips (or only `node_ids`: an island leaving a
    run) stops its ranks, rank 0 saving a checkpoint first when asked; `grace_s` bounds the wait before
    they are killed (0: at once)."""
    payload: dict = {"reason": str(reason)[:200], "checkpoint": checkpoint}
    if grace_s is not None:
        payload["grace_s"] = grace_s
    return commands.send_to_nodes(job, CommandType.STOP, payload, now=now, node_ids=node_ids)


def cancel(job: Job, now: datetime | None = None, *, operator_reason: str = "") -> Job:
    """The owner cancels, or the operator with a reason: a job not on chips ends at once; a running one is
    told to stop. The operator's reason is the job's reason from now on and the owner is e-mailed it."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.is_finished or job.cancel_requested_at:
            return job
        job.cancel_requested_at = now
        if operator_reason:
            job.set_status_reason(operator_cancel_text(operator_reason))
        job.save(update_fields=["cancel_requested_at", "status_reason", "status_reason_text", "updated_at"])
        if operator_reason:
            data = {"by": "operator", "reason": operator_reason}
            record_event(job, JobEventKind.CANCEL_REQUESTED, operator_cancel_text(operator_reason), data=data, now=now)
        else:
            record_event(job, JobEventKind.CANCEL_REQUESTED, StoredText(gettext_noop("Cancel requested")), now=now)
        if job.status in WAITING:
            moved = job.migrations.exists()
            return finish(job, JobStatus.CANCELLED, CANCELLED_MOVING if moved else CANCELLED_BEFORE_START, now=now)
        if job.status == JobStatus.MIGRATING:
            # Its chips were let go at the notice and its ranks told to stop then; fencing refuses
            # whatever they still report (their exits still free the chips they held).
            fence(job, now)
            return finish(job, JobStatus.CANCELLED, CANCELLED_MOVING, now=now)
        job.status = JobStatus.STOPPING
        job.save(update_fields=["status", "updated_at"])
        stop_ranks(job, "cancelled", checkpoint=False, now=now)
    return job


def stop_for_credit(
    job_id: int, reason: str | StoredText, *, data: dict | None = None, now: datetime | None = None
) -> bool:
    """Checkpoint and stop a job billing said must stop (billing.services.holds, billing.signals);
    True when this call stopped it."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status not in STOPPABLE or credit_stop_requested(job):
            if data and job.is_finished:  # a final charge the wallet could not cover
                record_event(job, JobEventKind.NOTICE, reason, data={**data, "stop": NO_CREDIT}, now=now)
            return False
        job.status = JobStatus.STOPPING
        job.set_status_reason(reason)
        job.save(update_fields=["status", "status_reason", "status_reason_text", "updated_at"])
        stop_ranks(job, NO_CREDIT, checkpoint=True, now=now)
        record_event(job, JobEventKind.NOTICE, reason, data={**(data or {}), "stop": NO_CREDIT}, now=now)
        transaction.on_commit(lambda: credit_stop_requested_email(job_id))
    logger.info("job %s stopped for credit: %s", job_id, str(reason))
    return True


def credit_stop_requested(job: Job) -> bool:
    """Whether the current placement was stopped for credit (so its end is `stopped_no_credit`)."""
    return JobEvent.objects.filter(job=job, epoch=job.epoch, kind=JobEventKind.NOTICE, data__stop=NO_CREDIT).exists()


def finish(job: Job, status: str, reason: str | StoredText = "", now: datetime | None = None) -> Job:
    """End a job once: its final status, its chips let go, its bids closed, and why. Call inside a transaction."""
    now = now or timezone.now()
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.is_finished:
        return job
    operator_reason = job.operator_cancel_reason() if status == JobStatus.CANCELLED else ""
    job.status = status
    # However the ranks end, an operator's cancel keeps the reason the owner was given.
    job.set_status_reason(operator_cancel_text(operator_reason) if operator_reason else reason)
    job.finished_at = now
    job.save(update_fields=["status", "status_reason", "status_reason_text", "finished_at", "updated_at"])
    if status == JobStatus.FAILED:
        stop_ranks(job, reason, checkpoint=False, grace_s=5, now=now)
    # Bids before allocations: ending its bids charges reserved chips (bid rows, then wallets, as a
    # clearing locks them); the allocations' final charge then locks allocations and wallets.
    close_job_bids(job, now)
    commands.withdraw_pending(job, "job finished", now, starts_only=True)
    allocations.release(job, now)
    migration.abandon_open_migrations(job)
    kind = {JobStatus.SUCCEEDED: JobEventKind.SUCCEEDED, JobStatus.FAILED: JobEventKind.FAILED}.get(
        status, JobEventKind.STOPPED
    )
    record_event(job, kind, job.stored_reason() or StoredText.label(JobStatus(job.status)), now=now)
    # One e-mail per job end (billing.notifications: succeeded, failed, out of credit, cancelled by the
    # operator), after the commit.
    transaction.on_commit(lambda: job_ended(job.pk, status, by_operator=bool(operator_reason)))
    return job


def operator_cancel_text(reason: str) -> StoredText:
    """What the owner reads (job page, e-mail, API) when the operator cancelled their job: the operator's
    words as they were typed, in a sentence in the reader's language."""
    return StoredText(gettext_noop("Cancelled by the operator: %(reason)s"), reason=reason)


def finish_overdue_stops(now: datetime) -> int:
    """A stopping job whose ranks never reported their exit ends after the stop grace: cancelled, or
    stopped for credit, as it was asked."""
    deadline = now - timedelta(seconds=settings.JOB_STOP_GRACE_S + 10)
    count = 0
    for job in Job.objects.filter(status=JobStatus.STOPPING):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job.pk)
            asked = _stop_asked_at(job)
            if job.status != JobStatus.STOPPING or asked is None or asked >= deadline:
                continue
            if job.cancel_requested_at:
                finish(
                    job, JobStatus.CANCELLED, StoredText(gettext_noop("Cancelled (the ranks were stopped)")), now=now
                )
            else:
                finish(job, JobStatus.STOPPED_NO_CREDIT, job.stored_reason(), now=now)
            count += 1
    return count


def _stop_asked_at(job: Job) -> datetime | None:
    if job.cancel_requested_at:
        return job.cancel_requested_at
    notice = JobEvent.objects.filter(job=job, epoch=job.epoch, kind=JobEventKind.NOTICE, data__stop=NO_CREDIT)
    return notice.order_by("created_at").values_list("created_at", flat=True).first()


def fail(job: Job, reason: str | StoredText, now: datetime | None = None) -> Job:
    """The job can't go on (a crash, a timeout, a plan that can't be made). Call inside a transaction."""
    return finish(job, JobStatus.FAILED, reason, now=now)


def end_without_node(job_id: int, detail: str | StoredText, now: datetime) -> Job:
    """A node of a job that can't move (starting, or stopping) is gone: the placement is fenced, and
    the job ends as it was asked to (a cancel, a credit stop), or fails. Call inside a transaction."""
    job = Job.objects.select_for_update().get(pk=job_id)
    if job.is_finished:
        return job
    stopped_for_credit = job.status == JobStatus.STOPPING and credit_stop_requested(job)
    fence(job, now)
    if job.status == JobStatus.STOPPING and job.cancel_requested_at:
        return finish(
            job, JobStatus.CANCELLED, StoredText(gettext_noop("Cancelled; %(detail)s."), detail=detail), now=now
        )
    if stopped_for_credit:
        return finish(job, JobStatus.STOPPED_NO_CREDIT, job.stored_reason(), now=now)
    failed = StoredText(gettext_noop("%(detail)s."), detail=StoredText.of(detail).cased("capfirst"))
    return finish(job, JobStatus.FAILED, failed, now=now)


def finish_when_ranks_done(job: Job, now: datetime) -> Job:
    """Every rank of the current placement exited cleanly: how the job ends depends on why they did."""
    if job.cancel_requested_at:
        return finish(job, JobStatus.CANCELLED, StoredText(gettext_noop("Cancelled")), now=now)
    if job.step >= job.max_steps:
        trained = StoredText(
            gettext_noop("Trained %(steps)s steps; final loss %(loss).4f"), steps=job.step, loss=job.loss
        )
        return finish(job, JobStatus.SUCCEEDED, trained, now=now)
    if credit_stop_requested(job):
        return finish(job, JobStatus.STOPPED_NO_CREDIT, job.stored_reason(), now=now)
    exited = StoredText(
        gettext_noop("All ranks exited at step %(step)s of %(steps)s"), step=job.step, steps=job.max_steps
    )
    return finish(job, JobStatus.FAILED, exited, now=now)


def finish_after_crash(job: Job, reason: str | StoredText, now: datetime) -> Job | None:
    """A rank exited with an error: a job that was being cancelled or stopped for credit ends as asked.
    Otherwise None: it may be a crash, or a peer whose host died (the reconciler decides)."""
    if job.cancel_requested_at:
        return finish(job, JobStatus.CANCELLED, reason, now=now)
    if credit_stop_requested(job):
        return finish(job, JobStatus.STOPPED_NO_CREDIT, reason, now=now)
    return None


def fence(job: Job, now: datetime) -> int:
    """End the job's current placement at once; returns the fenced epoch. Call with the job's row locked.

    The epoch moves on, so every later report, checkpoint and exit of the old ranks is refused as
    stale (409, and their agent kills them); commands still waiting for the old placement are
    withdrawn. The next placement bumps the epoch again, so it never reuses the fenced one.
    """
    fenced = job.epoch
    job.epoch += 1
    job.save(update_fields=["epoch", "updated_at"])
    commands.withdraw_pending(job, f"epoch {fenced} was fenced", now, up_to_epoch=fenced)
    return fenced

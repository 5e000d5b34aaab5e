"""The record of a hot migration (`JobMigration`): a running job moved off reclaimed or lost chips.

The moves themselves are transitions of the job (workers.services.lifecycle: `reclaim` gives
notice, `resume` sends the job back to the scheduler); this module keeps each move's record:

1. opened at the notice, with the reason, the nodes and, for a lost node, its last sign of work;
2. waiting for chips once the checkpoint is saved (or the old ranks are gone);
3. resuming once the scheduler placed the job with a new epoch;
4. resumed at the new placement's first step: steps and seconds lost are measured and training
   insurance (billing.services.insurance) refunds the old chips' unsaved time and the new chips'
   time until the resume, as one ledger transaction. For a lost node the unsaved work ends at its
   last sign of work (heartbeat or reported step), not when the loss was noticed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Max
from django.utils.translation import gettext_noop

from base.stored_text import StoredText, data_of, english
from billing.services.insurance import INSURANCE_MEMO, insurance_amount, pay_insurance
from fleet.choices import JobEventKind, MigrationReason, MigrationStatus
from fleet.models import Allocation, Job
from kernel.money import format_money
from workers.models import JobMetric, JobMigration
from workers.services.events import record_event


def open_migration(
    job: Job,
    reason: str,
    detail: str | StoredText,
    *,
    hostnames: list[str],
    notice_seconds: int,
    last_seen: datetime | None,
    now,
) -> JobMigration:
    """The notice: a new record of the move (for a lost node, `last_seen` is where its work ended)."""
    return JobMigration.objects.create(
        job=job,
        reason=reason,
        detail=english(detail),
        detail_text=data_of(detail),
        from_epoch=job.epoch,
        nodes=hostnames,
        notice_at=now,
        notice_seconds=notice_seconds,
        step_at_notice=job.step,
        last_seen_at=last_seen,
    )


def last_sign_of_work(job: Job, heartbeat: datetime | None, now: datetime) -> datetime:
    """Until when a lost placement is known to have worked: the node's last heartbeat, or the last step
    its ranks reported if that came later (a poll can be a long-poll's wait older than the freeze),
    never past the loss. Unsaved work is counted up to here, so steps and seconds lost agree."""
    last_step = JobMetric.objects.filter(job=job, epoch=job.epoch).aggregate(at=Max("created_at"))["at"]
    seen = max((moment for moment in (heartbeat, last_step) if moment is not None), default=now)
    return min(seen, now)


def noticed_migration(job: Job) -> JobMigration | None:
    """The move whose notice is running (checkpointing), if any."""
    return job.migrations.filter(status=MigrationStatus.NOTICE).order_by("-pk").first()


def mark_waiting(migration: JobMigration, job: Job) -> None:
    """The old placement is done: the move waits for chips, from the job's latest checkpoint."""
    migration.status = MigrationStatus.WAITING
    migration.checkpoint_step = job.latest_checkpoint_step
    migration.checkpoint_at = job.latest_checkpoint_at
    migration.save(update_fields=["status", "checkpoint_step", "checkpoint_at"])


def note_placement(job: Job, now: datetime) -> None:
    """The scheduler placed the job (inside the placement's transaction): a waiting move has its new epoch."""
    JobMigration.objects.filter(job=job, status=MigrationStatus.WAITING).update(
        status=MigrationStatus.RESUMING, to_epoch=job.epoch, replanned_at=now
    )


def abandon_open_migrations(job: Job) -> None:
    """The job ended while moving: its unfinished moves are abandoned (no refund)."""
    closed = [MigrationStatus.RESUMED, MigrationStatus.FINISHED, MigrationStatus.ABANDONED, MigrationStatus.ISLAND_LEFT]
    job.migrations.exclude(status__in=closed).update(status=MigrationStatus.ABANDONED)


def trained_to_the_end(job: Job) -> bool:
    """The job's latest checkpoint is at its last step: the final model is saved (a last step's save
    always exports it), so there is nothing left to train and nothing to move."""
    return job.latest_checkpoint_step is not None and job.latest_checkpoint_step >= job.max_steps


def close_as_finished(migration: JobMigration, job: Job) -> None:
    """The notice came too late to matter: the ranks finished first (no work lost, nothing to refund)."""
    migration.status = MigrationStatus.FINISHED
    migration.checkpoint_step = job.latest_checkpoint_step
    migration.checkpoint_at = job.latest_checkpoint_at
    migration.steps_lost, migration.lost_seconds = 0, 0.0
    migration.save(update_fields=["status", "checkpoint_step", "checkpoint_at", "steps_lost", "lost_seconds"])


def record_resume(job: Job, first_step: int, now: datetime) -> JobMigration | None:
    """The new placement reported its first step: close the move and pay the insurance."""
    migration = (
        JobMigration.objects.select_for_update()
        .filter(job=job, status=MigrationStatus.RESUMING, to_epoch=job.epoch)
        .order_by("-pk")
        .first()
    )
    if migration is None:
        return None
    reached = (
        JobMetric.objects.filter(job=job, epoch=migration.from_epoch).aggregate(step=Max("step"))["step"]
        or migration.step_at_notice
    )
    saved = migration.checkpoint_step or 0
    migration.resumed_at = now
    migration.resume_step = first_step
    # A fenced placement's later metrics were refused, so `reached` is the last step reported before the loss.
    migration.steps_lost = max(0, reached - saved)
    lost_from = _lost_work_start(job, migration)
    migration.lost_seconds = max(0.0, (work_end(migration) - lost_from).total_seconds()) if lost_from else 0.0
    migration.refund = insurance_amount(
        Allocation.objects.filter(job=job, epoch=migration.from_epoch),
        Allocation.objects.filter(job=job, epoch=migration.to_epoch),
        lost_from=lost_from,
        work_end=work_end(migration),
        notice_at=migration.notice_at,
        resumed_at=now,
    )
    migration.status = MigrationStatus.RESUMED
    if migration.refund > 0:
        migration.refund_transaction = pay_insurance(
            job.owner,
            migration.refund,
            key=f"insurance:{migration.pk}",
            memo=StoredText(
                INSURANCE_MEMO, job=job.pk, reason=StoredText.label(MigrationReason(migration.reason), case="lower")
            ),
            now=now,
        )
    migration.save()
    record_event(
        job,
        JobEventKind.RESUMED,
        StoredText(
            gettext_noop(
                "Resumed at step %(step)s on %(ranks)s rank(s), %(downtime).1fs after the notice; "
                "%(lost)s step(s) lost; insurance refund %(refund)s"
            ),
            step=first_step,
            ranks=job.plan.world_size,
            downtime=migration.downtime_seconds,
            lost=migration.steps_lost,
            refund=format_money(migration.refund),
        ),
        data={"migration": migration.pk, "refund": migration.refund, "steps_lost": migration.steps_lost},
        now=now,
    )
    return migration


def work_end(migration: JobMigration) -> datetime:
    """Where the old placement's work ended: the notice, or a lost node's last sign of work (not the detection)."""
    return migration.last_seen_at or migration.notice_at


def _lost_work_start(job: Job, migration: JobMigration) -> datetime | None:
    """Where unsaved work began: the checkpoint, if taken before the work ended; else the old placement's start."""
    if migration.checkpoint_at and migration.checkpoint_at >= work_end(migration):
        return None  # checkpointed on notice (or after the lost node was last heard from): nothing was lost
    old = Allocation.objects.filter(job=job, epoch=migration.from_epoch).order_by("started_at").first()
    if old is None:
        return None
    return max(migration.checkpoint_at, old.started_at) if migration.checkpoint_at else old.started_at


def overdue_notices(now: datetime) -> list[int]:
    """Jobs whose notice ran out before every old rank reported its exit: they go on without them."""
    return [
        migration.job_id
        for migration in JobMigration.objects.filter(status=MigrationStatus.NOTICE)
        if migration.notice_at + timedelta(seconds=migration.notice_seconds + 2) <= now
    ]

"""Hot migration: move a running job off reclaimed or lost chips and resume it from its checkpoint.

1. `reclaim_job`: the notice. Billing of every chip of the job stops now (the allocations end);
   the chips stay held for the notice period so the ranks can checkpoint and leave; the agents
   are told at once (a stop-with-checkpoint command, woken through their long-poll). A lost node
   can't checkpoint: the job goes straight to step 2 from its last periodic checkpoint, and its
   placement is fenced at once (`fence_epoch`): the epoch moves on, so whatever the old ranks say
   later (a frozen node that wakes up) is refused, and every node is told to kill them.
2. `continue_migration`: once every rank of the old placement has exited (or the notice ran out),
   the held chips are let go and the job goes back to the scheduler, which re-plans it with its
   global batch pinned and places it with a new epoch (old ranks are fenced out); the new ranks
   resume from the checkpoint, resharded to the new world size.
3. `record_resume`: the first metric of the new placement. The migration is complete; training
   insurance refunds the seconds between the checkpoint and the notice on the old chips, and the
   new chips' seconds from their start to the resume, as one ledger transaction. For a lost node
   the unsaved work ends at its last sign of work (heartbeat or reported step), not when the loss
   was noticed.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from billing.choices import AccountKind, TransactionKind
from billing.money import format_amount, round_micros
from billing.services.ledger import Leg, platform_account, post_transaction, wallet_for
from billing.services.meter import PriceBook, charge_allocations
from workers.choices import CommandStatus, JobEventKind, JobStatus
from workers.models import (
    AgentCommand,
    Allocation,
    Job,
    JobMetric,
    JobMigration,
    MigrationReason,
    MigrationStatus,
    Node,
)
from workers.protocol import CommandType
from workers.services.events import record_event
from workers.services.placement import send_to_nodes
from workers.services.queue import wake_waiting_jobs

logger = logging.getLogger(__name__)

MOVABLE = {JobStatus.PROVISIONING, JobStatus.RUNNING}


def reclaim_job(
    job_id: int,
    reason: str,
    detail: str,
    *,
    chip_type_id: int | None = None,
    nodes: list[Node] | None = None,
    notice_seconds: int,
    now: datetime | None = None,
    last_seen: datetime | None = None,
) -> JobMigration | None:
    """Give the job notice and stop billing its chips; None when it is not running (nothing to move).

    For a lost node (`last_seen`: its last heartbeat), the old placement is fenced at once and its
    ranks everywhere are killed instead of checkpointing.
    """
    now = now or timezone.now()
    lost = reason == MigrationReason.LOST_NODE
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status not in MOVABLE or job.cancel_requested_at or job.step >= job.max_steps:
            return None  # nothing to move (a job past its last step is saving its model and ending)
        allocations = list(Allocation.objects.open().filter(job=job).select_related("node"))
        if not allocations:
            return None
        hostnames = sorted(
            {
                a.node.hostname
                for a in allocations
                if (chip_type_id is None or a.chip_type_id == chip_type_id) and (nodes is None or a.node in nodes)
            }
        )
        migration = JobMigration.objects.create(
            job=job,
            reason=reason,
            detail=detail,
            from_epoch=job.epoch,
            nodes=hostnames,
            notice_at=now,
            notice_seconds=0 if lost else notice_seconds,
            step_at_notice=job.step,
            last_seen_at=last_sign_of_work(job, last_seen, now) if lost else None,
        )
        if lost:
            fence_epoch(job, now)
        job.status = JobStatus.MIGRATING
        job.status_reason = f"{MigrationReason(reason).label}: {detail}. Moving to other chips."
        job.save(update_fields=["status", "status_reason", "updated_at"])
        # Every rank stops (data parallelism needs all of them); rank 0 checkpoints first unless a peer is
        # gone: then the ranks are killed at once (grace 0), the lost node's too as soon as its agent polls.
        send_to_nodes(
            job,
            CommandType.STOP,
            {
                "reason": job.status_reason[:200],
                "checkpoint": not lost,
                "grace_s": 0 if lost else max(notice_seconds, 5),
            },
            now=now,
        )
        # Chips stay held while the ranks checkpoint and leave; a lost node's job moves on at once.
        hold = None if lost else now + timedelta(seconds=notice_seconds)
        ending = [a.pk for a in allocations]
        Allocation.objects.filter(pk__in=ending).update(ended_at=now, held_until=hold)
        charge_allocations(ending, now)  # billing of the old chips stops at the notice
        record_event(
            job,
            JobEventKind.NOTICE,
            f"{MigrationReason(reason).label} ({', '.join(hostnames)}): {detail}. "
            + ("Resuming from the last checkpoint." if lost else f"Checkpointing within {notice_seconds}s."),
            data={"migration": migration.pk, "reason": reason, "notice_seconds": migration.notice_seconds},
            now=now,
        )
        if lost:
            continue_migration(job.pk, now=now)
    return migration


def last_sign_of_work(job: Job, heartbeat: datetime | None, now: datetime) -> datetime:
    """Until when a lost placement is known to have worked: the node's last heartbeat, or the last step
    its ranks reported if that came later (a poll can be a long-poll's wait older than the freeze),
    never past the loss. Unsaved work is counted up to here, so steps and seconds lost agree."""
    last_step = JobMetric.objects.filter(job=job, epoch=job.epoch).aggregate(at=Max("created_at"))["at"]
    seen = max((moment for moment in (heartbeat, last_step) if moment is not None), default=now)
    return min(seen, now)


def fence_epoch(job: Job, now: datetime) -> int:
    """End the job's current placement at once; returns the fenced epoch. Call with the job's row locked.

    The epoch moves on, so every later report, checkpoint and exit of the old ranks is refused as
    stale (409, and their agent kills them); commands still waiting for the old placement are
    withdrawn. The next placement bumps the epoch again, so it never reuses the fenced one.
    """
    fenced = job.epoch
    job.epoch += 1
    job.save(update_fields=["epoch", "updated_at"])
    AgentCommand.objects.filter(job=job, epoch__lte=fenced, status=CommandStatus.PENDING).update(
        status=CommandStatus.REFUSED, error=f"epoch {fenced} was fenced", acked_at=now
    )
    return fenced


def continue_migration(job_id: int, now: datetime | None = None, release: bool = True) -> bool:
    """The checkpoint is saved or the old ranks are gone (or out of time): send the job to the scheduler.

    With `release`, the chips held for the leaving ranks are let go too; otherwise they are let go as
    each node reports its ranks' exits (`release_leaving_chips`), or when the notice runs out.
    """
    from workers.tasks import schedule_job

    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        migration = job.migrations.filter(status=MigrationStatus.NOTICE).order_by("-pk").first()
        if job.status != JobStatus.MIGRATING or migration is None:
            return False
        if release and Allocation.objects.filter(job=job, held_until__gt=now).update(held_until=now):
            wake_waiting_jobs(now)
        migration.status = MigrationStatus.WAITING
        migration.checkpoint_step = job.latest_checkpoint_step
        migration.checkpoint_at = job.latest_checkpoint_at
        migration.save(update_fields=["status", "checkpoint_step", "checkpoint_at"])
        job.status = JobStatus.QUEUED
        job.status_reason = (
            f"Re-planning from the checkpoint at step {job.latest_checkpoint_step}."
            if job.latest_checkpoint
            else "Re-planning from the start (no checkpoint was saved)."
        )
        job.save(update_fields=["status", "status_reason", "updated_at"])
        record_event(job, JobEventKind.MIGRATED, job.status_reason, data={"migration": migration.pk}, now=now)
        schedule_job.delay_on_commit(job_id)
    return True


def release_leaving_chips(job: Job, epoch: int, node: Node, now: datetime) -> int:
    """A node reported that a rank of an older placement exited: its chips there are free again."""
    freed = Allocation.objects.filter(job=job, epoch=epoch, node=node, held_until__gt=now).update(held_until=now)
    if freed:
        wake_waiting_jobs(now)
    return freed


def note_placement(job: Job, now: datetime) -> None:
    """Called by placement inside its transaction: a waiting migration now has its new epoch."""
    JobMigration.objects.filter(job=job, status=MigrationStatus.WAITING).update(
        status=MigrationStatus.RESUMING, to_epoch=job.epoch, replanned_at=now
    )


def record_resume(job: Job, first_step: int, now: datetime) -> JobMigration | None:
    """The new placement reported its first step: close the migration and pay the insurance."""
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
    lost_until = work_end(migration)
    migration.lost_seconds = max(0.0, (lost_until - lost_from).total_seconds()) if lost_from else 0.0
    migration.refund = insurance_amount(job, migration, lost_from)
    migration.status = MigrationStatus.RESUMED
    if migration.refund > 0:
        migration.refund_transaction = post_transaction(
            key=f"insurance:{migration.pk}",
            kind=TransactionKind.REFUND,
            legs=[
                Leg(platform_account(AccountKind.INSURANCE), -migration.refund),
                Leg(wallet_for(job.owner), migration.refund),
            ],
            memo=f"Training insurance for job {job.pk}: {MigrationReason(migration.reason).label.lower()}",
            now=now,
        )
    migration.save()
    record_event(
        job,
        JobEventKind.RESUMED,
        f"Resumed at step {first_step} on {len(job.plan['ranks'])} rank(s), "
        f"{migration.downtime_seconds:.1f}s after the notice; {migration.steps_lost} step(s) lost; "
        f"insurance refund {format_amount(migration.refund)}",
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


def insurance_amount(job: Job, migration: JobMigration, lost_from: datetime | None) -> int:
    """Cost of the old chips over [lost_from, work end) plus the new chips over [their start, resume)."""
    old = list(Allocation.objects.filter(job=job, epoch=migration.from_epoch))
    new = list(Allocation.objects.filter(job=job, epoch=migration.to_epoch))
    book = PriceBook.load({a.chip_type_id for a in old + new})
    exact = Decimal(0)
    for allocation in old:
        if lost_from is not None:
            start = max(lost_from, allocation.started_at)
            end = min(work_end(migration), allocation.ended_at or migration.notice_at)
            if end > start:
                exact += allocation.chips * book.integral(allocation.chip_type_id, allocation.mode, start, end)
    for allocation in new:
        end = min(migration.resumed_at, allocation.ended_at or migration.resumed_at)
        if end > allocation.started_at:
            exact += allocation.chips * book.integral(
                allocation.chip_type_id, allocation.mode, allocation.started_at, end
            )
    return round_micros(exact / (3600 * 1_000_000))


def overdue_notices(now: datetime) -> int:
    """Migrations whose notice ran out before every old rank reported its exit go on without them."""
    count = 0
    for migration in JobMigration.objects.filter(status=MigrationStatus.NOTICE).select_related("job"):
        if migration.notice_at + timedelta(seconds=migration.notice_seconds + 2) <= now:
            count += continue_migration(migration.job_id, now=now)
    return count

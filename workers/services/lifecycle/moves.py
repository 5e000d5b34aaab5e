"""How a job moves to other chips: notice to leave them (`reclaim`), then back to the queue from its
checkpoint (`resume`), or straight to its end when its ranks saved the model at the last step first."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from fleet.choices import JobEventKind, JobStatus, MigrationReason
from fleet.models import Allocation, Job, Node
from workers.models import JobMigration
from workers.services import allocations, migration
from workers.services.events import record_event
from workers.services.lifecycle import islands
from workers.services.lifecycle.ends import fence, finish, stop_ranks
from workers.services.lifecycle.starts import announce_queued

MOVABLE = {JobStatus.PROVISIONING, JobStatus.RUNNING}


def reclaim(
    job_id: int,
    reason: str,
    detail: str | StoredText,
    *,
    chip_type_id: int | None = None,
    nodes: list[Node] | None = None,
    notice_seconds: int,
    now: datetime | None = None,
    last_seen: datetime | None = None,
) -> JobMigration | None:
    """Give a running job notice to leave its chips; None when it is not running (nothing to move).

    Billing of every chip of the job stops now (its allocations end); the chips stay held for the
    notice so the ranks can checkpoint and leave, and the agents are told at once. A lost node
    (`last_seen`: its last heartbeat) can't checkpoint: the placement is fenced at once, every rank
    is killed, and the job goes straight back to the queue from its last periodic checkpoint.
    """
    now = now or timezone.now()
    lost = reason == MigrationReason.LOST_NODE
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status not in MOVABLE or job.cancel_requested_at or job.step >= job.max_steps:
            return None  # nothing to move (a job past its last step is saving its model and ending)
        held = list(Allocation.objects.open().filter(job=job).select_related("node"))
        if not held:
            return None
        affected = [
            a
            for a in held
            if (chip_type_id is None or a.chip_type_id == chip_type_id) and (nodes is None or a.node in nodes)
        ]
        if job.status == JobStatus.RUNNING:  # a run of islands: the affected islands leave, the others go on
            left = islands.leave_in_place(
                job,
                held,
                affected,
                reason,
                detail,
                lost=lost,
                notice_seconds=notice_seconds,
                last_seen=migration.last_sign_of_work(job, last_seen, now) if lost else None,
                now=now,
            )
            if left is not None:
                return left
        hostnames = sorted({a.node.hostname for a in affected})
        move = migration.open_migration(
            job,
            reason,
            detail,
            hostnames=hostnames,
            notice_seconds=0 if lost else notice_seconds,
            last_seen=migration.last_sign_of_work(job, last_seen, now) if lost else None,
            now=now,
        )
        if lost:
            fence(job, now)
        job.status = JobStatus.MIGRATING
        why = StoredText.label(MigrationReason(reason))
        job.set_status_reason(
            StoredText(gettext_noop("%(reason)s: %(detail)s. Moving to other chips."), reason=why, detail=detail)
        )
        job.save(update_fields=["status", "status_reason", "status_reason_text", "updated_at"])
        # Every rank stops (data parallelism needs all of them); rank 0 checkpoints first unless a peer is
        # gone: then the ranks are killed at once, the lost node's too as soon as its agent polls.
        stop_ranks(job, job.status_reason, checkpoint=not lost, grace_s=0 if lost else max(notice_seconds, 5), now=now)
        allocations.end_for_notice(held, now, hold_seconds=None if lost else notice_seconds)
        record_event(
            job,
            JobEventKind.NOTICE,
            StoredText(
                gettext_noop("%(reason)s (%(hosts)s): %(detail)s. Resuming from the last checkpoint.")
                if lost
                else gettext_noop("%(reason)s (%(hosts)s): %(detail)s. Checkpointing within %(seconds)ss."),
                reason=why,
                hosts=", ".join(hostnames),
                detail=detail,
                **({} if lost else {"seconds": notice_seconds}),
            ),
            data={"migration": move.pk, "reason": reason, "notice_seconds": move.notice_seconds},
            now=now,
        )
        if lost:
            resume(job.pk, now=now)
    return move


def resume(job_id: int, now: datetime | None = None, release: bool = True) -> bool:
    """The notice's checkpoint is saved or the old ranks are gone (or out of time): back to the queue,
    to be placed again from the checkpoint with the global batch pinned.

    With `release`, the chips held for the leaving ranks are let go too; otherwise they are let go as
    each node reports its ranks' exits, or when the notice runs out. A job whose ranks saved the
    model at its last step before the notice reached them succeeds instead (False: not queued).
    """
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        move = migration.noticed_migration(job)
        if job.status != JobStatus.MIGRATING or move is None:
            return False
        if migration.trained_to_the_end(job):
            _finish_instead_of_moving(job, move, now)
            return False
        if release:
            allocations.let_go_held(job, now)
        migration.mark_waiting(move, job)
        job.status = JobStatus.QUEUED
        replanning = (
            StoredText(
                gettext_noop("Re-planning from the checkpoint at step %(step)s."), step=job.latest_checkpoint_step
            )
            if job.latest_checkpoint
            else StoredText(gettext_noop("Re-planning from the start (no checkpoint was saved)."))
        )
        job.set_status_reason(replanning)
        job.save(update_fields=["status", "status_reason", "status_reason_text", "updated_at"])
        record_event(job, JobEventKind.MIGRATED, replanning, data={"migration": move.pk}, now=now)
        announce_queued(job_id)
    return True


def _finish_instead_of_moving(job: Job, move: JobMigration, now: datetime) -> None:
    """Placed again, the job would have no step to train (and a placement to pay for): it is done.
    Under load a notice can reach the ranks after their last step (#28)."""
    allocations.let_go_held(job, now)
    migration.close_as_finished(move, job)
    steps = job.latest_checkpoint_step
    done = (
        StoredText(gettext_noop("Trained %(steps)s steps before it had to move"), steps=steps)
        if job.loss is None
        else StoredText(
            gettext_noop("Trained %(steps)s steps before it had to move; final loss %(loss).4f"),
            steps=steps,
            loss=job.loss,
        )
    )
    finish(job, JobStatus.SUCCEEDED, done, now=now)

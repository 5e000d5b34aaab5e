"""A job's life: every change of a job's status is made here, and nowhere else.

    queued ─claim─> planning ─place─> provisioning ─first step─> running ─every rank done─> succeeded
    planning ─no chips yet─> queued             planning ─can never be planned─> failed
    provisioning, running ─reclaim─> migrating ─resume─> queued (placed again with a new epoch)
    provisioning, running ─cancel or credit stop─> stopping ─ranks gone─> cancelled, stopped_no_credit
    migrating ─credit stop─> stopping
    queued, planning, migrating ─cancel─> cancelled          any live status ─crash, loss, timeout─> failed

Every arrow with the function that makes it and its callers: docs/ARCHITECTURE.md, section 3.

Every transition locks the job's row, re-reads it and does nothing when it has already happened
(a retry, a second beat, a duplicate report), in one database transaction with what it implies:
events on the timeline, commands for the agents (the one STOP is built by `stop_ranks`), the
chips let go (workers.services.allocations, whose final charge ends billing), the bids closed,
the move's record kept (workers.services.migration).

A transition that puts a job back in the queue sends `job_queued` after its commit; the scheduler
(workers.receivers -> workers.services.scheduling) plans it. Should that message be lost, the
planning pass finds the queued job on its own.

Obligations: a new way for a job to end must go through `finish`
(it closes bids, ends allocations and abandons moves); a new way to stop ranks must use `stop_ranks`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from billing.notifications import credit_stop_requested as credit_stop_requested_email
from billing.notifications import job_ended
from market.services.bids import close_job_bids
from workers.choices import JobEventKind, JobStatus
from workers.models import Allocation, Job, JobEvent, JobMigration, MigrationReason, Node
from workers.modelspecs import ModelSpec
from workers.planner import Plan
from workers.protocol import CommandType
from workers.services import allocations, commands, migration
from workers.services.events import record_event
from workers.services.queue import next_plan_time
from workers.spec import JobSpec

logger = logging.getLogger(__name__)

# Sent after the commit of a transition that queued a job (keyword argument: job_id).
job_queued = Signal()

NO_CREDIT = "no_credit"  # marks the notice event of a credit stop (its `data["stop"]`)
MOVABLE = {JobStatus.PROVISIONING, JobStatus.RUNNING}
STOPPABLE = {JobStatus.PROVISIONING, JobStatus.RUNNING, JobStatus.MIGRATING}
WAITING = {JobStatus.QUEUED, JobStatus.PLANNING}


# Queue and placement ----------------------------------------------------------------------------


def submit(
    owner, spec: JobSpec, *, credit_hold: int = 0, model: ModelSpec | None = None, quote: Plan | None = None
) -> Job:
    """A validated job enters the queue (workers.services.launch decides whether it may); `model` is its
    model as planning sized it, kept for the market's fit check; `quote` the plan its owner was quoted."""
    with transaction.atomic():
        job = Job.objects.create(
            owner=owner,
            status=JobStatus.QUEUED,
            credit_hold=credit_hold,
            model_spec=model.as_dict() if model else None,
            quote=quote,
            **spec.job_columns(),
        )
        record_event(job, JobEventKind.QUEUED, "Queued")
        _announce_queued(job.pk)
    return job


def claim_for_planning(job_id: int, now: datetime | None = None) -> Job | None:
    """Take a queued job for planning; None when another planner has it, or it is no longer queued.

    A conditional UPDATE, so two planning passes never plan one job at once.
    """
    claimed = Job.objects.filter(pk=job_id, status=JobStatus.QUEUED, cancel_requested_at__isnull=True).update(
        status=JobStatus.PLANNING, updated_at=now or timezone.now()
    )
    return Job.objects.get(pk=job_id) if claimed else None


def wait_for_chips(job_id: int, reason: str, now: datetime | None = None) -> None:
    """No chips for it now: the job waits in the queue, planned again after its backoff (or sooner, when
    chips free up or a node comes online: workers.services.queue)."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != JobStatus.PLANNING:
            return
        first_wait = job.status_reason != reason
        job.status, job.status_reason = JobStatus.QUEUED, reason
        job.plan_attempts += 1
        job.next_plan_at = next_plan_time(job.plan_attempts, now)
        job.save(update_fields=["status", "status_reason", "plan_attempts", "next_plan_at", "updated_at"])
        if first_wait:
            record_event(job, JobEventKind.WAITING, reason, now=now)


def requeue_abandoned_planning(now: datetime) -> int:
    """A worker that died while planning leaves its job in PLANNING; it goes back to the queue."""
    deadline = now - timedelta(seconds=60)
    return Job.objects.filter(status=JobStatus.PLANNING, updated_at__lt=deadline).update(
        status=JobStatus.QUEUED, updated_at=now
    )


def place(job: Job, plan: Plan, now: datetime) -> None:
    """The job got chips (call inside placement's transaction, the job's row locked): a new epoch, so
    whatever an older placement's ranks say from now on is refused."""
    job.epoch += 1
    job.plan = plan
    job.quote = job.quote or plan  # a job launched without a quote compares with its first placement
    job.status = JobStatus.PROVISIONING
    job.status_reason = ""
    job.waiting_for = None
    job.plan_attempts, job.next_plan_at = 0, None
    job.save(
        update_fields=[
            "epoch",
            "plan",
            "quote",
            "status",
            "status_reason",
            "waiting_for",
            "plan_attempts",
            "next_plan_at",
            "updated_at",
        ]
    )
    migration.note_placement(job, now)
    record_event(job, JobEventKind.PLACED, plan.describe(), data={"plan": plan.to_dict()}, now=now)


def start_running(job: Job, first_step: int, now: datetime) -> None:
    """The placement reported its first step (call with the job's row locked)."""
    if job.status != JobStatus.PROVISIONING:
        return
    job.status = JobStatus.RUNNING
    job.started_at = job.started_at or now
    job.save(update_fields=["status", "started_at", "updated_at"])
    if migration.record_resume(job, first_step, now) is None:
        record_event(job, JobEventKind.STARTED, f"Training started on {job.plan.world_size} rank(s)", now=now)


# Stops and ends ---------------------------------------------------------------------------------


def stop_ranks(job: Job, reason: str, *, checkpoint: bool, grace_s: int | None = None, now: datetime) -> list[int]:
    """The one STOP command: every node holding the job's chips stops its ranks, rank 0 saving a
    checkpoint first when asked; `grace_s` bounds the wait before they are killed (0: at once)."""
    payload: dict = {"reason": reason[:200], "checkpoint": checkpoint}
    if grace_s is not None:
        payload["grace_s"] = grace_s
    return commands.send_to_nodes(job, CommandType.STOP, payload, now=now)


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
            job.status_reason = operator_cancel_text(operator_reason)
        job.save(update_fields=["cancel_requested_at", "status_reason", "updated_at"])
        if operator_reason:
            data = {"by": "operator", "reason": operator_reason}
            record_event(job, JobEventKind.CANCEL_REQUESTED, job.status_reason, data=data, now=now)
        else:
            record_event(job, JobEventKind.CANCEL_REQUESTED, "Cancel requested", now=now)
        if job.status in WAITING:
            moved = job.migrations.exists()
            return finish(
                job,
                JobStatus.CANCELLED,
                "Cancelled while moving to other chips" if moved else "Cancelled before it started",
                now=now,
            )
        if job.status == JobStatus.MIGRATING:
            # Its chips were let go at the notice and its ranks told to stop then; fencing refuses
            # whatever they still report (their exits still free the chips they held).
            fence(job, now)
            return finish(job, JobStatus.CANCELLED, "Cancelled while moving to other chips", now=now)
        job.status = JobStatus.STOPPING
        job.save(update_fields=["status", "updated_at"])
        stop_ranks(job, "cancelled", checkpoint=False, now=now)
    return job


def stop_for_credit(job_id: int, reason: str, *, data: dict | None = None, now: datetime | None = None) -> bool:
    """Checkpoint and stop a job billing said must stop (billing.services.holds, billing.signals);
    True when this call stopped it."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status not in STOPPABLE or credit_stop_requested(job):
            if data and job.is_finished:  # a final charge the wallet could not cover
                record_event(job, JobEventKind.NOTICE, reason, data={**data, "stop": NO_CREDIT}, now=now)
            return False
        job.status, job.status_reason = JobStatus.STOPPING, reason
        job.save(update_fields=["status", "status_reason", "updated_at"])
        stop_ranks(job, NO_CREDIT, checkpoint=True, now=now)
        record_event(job, JobEventKind.NOTICE, reason, data={**(data or {}), "stop": NO_CREDIT}, now=now)
        transaction.on_commit(lambda: credit_stop_requested_email(job_id))
    logger.info("job %s stopped for credit: %s", job_id, reason)
    return True


def credit_stop_requested(job: Job) -> bool:
    """Whether the current placement was stopped for credit (so its end is `stopped_no_credit`)."""
    return JobEvent.objects.filter(job=job, epoch=job.epoch, kind=JobEventKind.NOTICE, data__stop=NO_CREDIT).exists()


def finish(job: Job, status: str, reason: str = "", now: datetime | None = None) -> Job:
    """End a job once: its final status, its chips let go, its bids closed, and why. Call inside a transaction."""
    now = now or timezone.now()
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.is_finished:
        return job
    operator_reason = job.operator_cancel_reason() if status == JobStatus.CANCELLED else ""
    job.status = status
    # However the ranks end, an operator's cancel keeps the reason the owner was given.
    job.status_reason = operator_cancel_text(operator_reason) if operator_reason else reason
    job.finished_at = now
    job.save(update_fields=["status", "status_reason", "finished_at", "updated_at"])
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
    record_event(job, kind, job.status_reason or job.get_status_display(), now=now)
    # One e-mail per job end (billing.notifications: succeeded, failed, out of credit, cancelled by the
    # operator), after the commit.
    transaction.on_commit(lambda: job_ended(job.pk, status, by_operator=bool(operator_reason)))
    return job


def operator_cancel_text(reason: str) -> str:
    """What the owner reads (job page, e-mail, API) when the operator cancelled their job."""
    return f"Cancelled by the operator: {reason}"


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
                finish(job, JobStatus.CANCELLED, "Cancelled (the ranks were stopped)", now=now)
            else:
                finish(job, JobStatus.STOPPED_NO_CREDIT, job.status_reason, now=now)
            count += 1
    return count


def _stop_asked_at(job: Job) -> datetime | None:
    if job.cancel_requested_at:
        return job.cancel_requested_at
    notice = JobEvent.objects.filter(job=job, epoch=job.epoch, kind=JobEventKind.NOTICE, data__stop=NO_CREDIT)
    return notice.order_by("created_at").values_list("created_at", flat=True).first()


def fail(job: Job, reason: str, now: datetime | None = None) -> Job:
    """The job can't go on (a crash, a timeout, a plan that can't be made). Call inside a transaction."""
    return finish(job, JobStatus.FAILED, reason, now=now)


def end_without_node(job_id: int, detail: str, now: datetime) -> Job:
    """A node of a job that can't move (starting, or stopping) is gone: the placement is fenced, and
    the job ends as it was asked to (a cancel, a credit stop), or fails. Call inside a transaction."""
    job = Job.objects.select_for_update().get(pk=job_id)
    if job.is_finished:
        return job
    stopped_for_credit = job.status == JobStatus.STOPPING and credit_stop_requested(job)
    fence(job, now)
    if job.status == JobStatus.STOPPING and job.cancel_requested_at:
        return finish(job, JobStatus.CANCELLED, f"Cancelled; {detail}.", now=now)
    if stopped_for_credit:
        return finish(job, JobStatus.STOPPED_NO_CREDIT, job.status_reason, now=now)
    return finish(job, JobStatus.FAILED, f"{detail[0].upper()}{detail[1:]}.", now=now)


def finish_when_ranks_done(job: Job, now: datetime) -> Job:
    """Every rank of the current placement exited cleanly: how the job ends depends on why they did."""
    if job.cancel_requested_at:
        return finish(job, JobStatus.CANCELLED, "Cancelled", now=now)
    if job.step >= job.max_steps:
        return finish(job, JobStatus.SUCCEEDED, f"Trained {job.step} steps; final loss {job.loss:.4f}", now=now)
    if credit_stop_requested(job):
        return finish(job, JobStatus.STOPPED_NO_CREDIT, job.status_reason, now=now)
    return finish(job, JobStatus.FAILED, f"All ranks exited at step {job.step} of {job.max_steps}", now=now)


def finish_after_crash(job: Job, reason: str, now: datetime) -> Job | None:
    """A rank exited with an error: a job that was being cancelled or stopped for credit ends as asked.
    Otherwise None: it may be a crash, or a peer whose host died (the reconciler decides)."""
    if job.cancel_requested_at:
        return finish(job, JobStatus.CANCELLED, reason, now=now)
    if credit_stop_requested(job):
        return finish(job, JobStatus.STOPPED_NO_CREDIT, reason, now=now)
    return None


# Moves -----------------------------------------------------------------------------------------


def reclaim(
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
        hostnames = sorted(
            {
                a.node.hostname
                for a in held
                if (chip_type_id is None or a.chip_type_id == chip_type_id) and (nodes is None or a.node in nodes)
            }
        )
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
        job.status_reason = f"{MigrationReason(reason).label}: {detail}. Moving to other chips."
        job.save(update_fields=["status", "status_reason", "updated_at"])
        # Every rank stops (data parallelism needs all of them); rank 0 checkpoints first unless a peer is
        # gone: then the ranks are killed at once, the lost node's too as soon as its agent polls.
        stop_ranks(job, job.status_reason, checkpoint=not lost, grace_s=0 if lost else max(notice_seconds, 5), now=now)
        allocations.end_for_notice(held, now, hold_seconds=None if lost else notice_seconds)
        record_event(
            job,
            JobEventKind.NOTICE,
            f"{MigrationReason(reason).label} ({', '.join(hostnames)}): {detail}. "
            + ("Resuming from the last checkpoint." if lost else f"Checkpointing within {notice_seconds}s."),
            data={"migration": move.pk, "reason": reason, "notice_seconds": move.notice_seconds},
            now=now,
        )
        if lost:
            resume(job.pk, now=now)
    return move


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
        job.status_reason = (
            f"Re-planning from the checkpoint at step {job.latest_checkpoint_step}."
            if job.latest_checkpoint
            else "Re-planning from the start (no checkpoint was saved)."
        )
        job.save(update_fields=["status", "status_reason", "updated_at"])
        record_event(job, JobEventKind.MIGRATED, job.status_reason, data={"migration": move.pk}, now=now)
        _announce_queued(job_id)
    return True


def _finish_instead_of_moving(job: Job, move: JobMigration, now: datetime) -> None:
    """Placed again, the job would have no step to train (and a placement to pay for): it is done.
    Under load a notice can reach the ranks after their last step (#28)."""
    allocations.let_go_held(job, now)
    migration.close_as_finished(move, job)
    loss = f"; final loss {job.loss:.4f}" if job.loss is not None else ""
    done = f"Trained {job.latest_checkpoint_step} steps before it had to move{loss}"
    finish(job, JobStatus.SUCCEEDED, done, now=now)


def _announce_queued(job_id: int) -> None:
    transaction.on_commit(lambda: job_queued.send(sender=Job, job_id=job_id))

"""How a job starts: queued, taken for planning, back to the queue while no chips are free, placed, running."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone
from django.utils.translation import gettext_noop

from base.stored_text import StoredText, english
from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from kernel.modelspecs import ModelSpec
from kernel.planner import Plan
from kernel.planner.types import PLACED
from kernel.spec import JobSpec
from workers.services import migration
from workers.services.events import record_event
from workers.services.queue import next_plan_time

# Sent after the commit of a transition that queued a job (keyword argument: job_id).
job_queued = Signal()

WAITING = {JobStatus.QUEUED, JobStatus.PLANNING}


def submit(
    owner,
    spec: JobSpec,
    *,
    credit_hold: int = 0,
    model: ModelSpec | None = None,
    quote: Plan | None = None,
    deployment=None,
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
            deployment=deployment,
            serving={"state": "queued"} if deployment else {},
            **spec.job_columns(),
        )
        record_event(job, JobEventKind.QUEUED, StoredText(gettext_noop("Queued")))
        announce_queued(job.pk)
    return job


def claim_for_planning(job_id: int, now: datetime | None = None) -> Job | None:
    """Take a queued job for planning; None when another planner has it, or it is no longer queued.

    A conditional UPDATE, so two planning passes never plan one job at once.
    """
    claimed = Job.objects.filter(pk=job_id, status=JobStatus.QUEUED, cancel_requested_at__isnull=True).update(
        status=JobStatus.PLANNING, updated_at=now or timezone.now()
    )
    return Job.objects.get(pk=job_id) if claimed else None


def wait_for_chips(job_id: int, reason: str | StoredText, now: datetime | None = None) -> None:
    """No chips for it now: the job waits in the queue, planned again after its backoff (or sooner, when
    chips free up or a node comes online: workers.services.queue)."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if job.status != JobStatus.PLANNING:
            return
        first_wait = job.status_reason != english(reason)
        job.status = JobStatus.QUEUED
        job.set_status_reason(reason)
        job.plan_attempts += 1
        job.next_plan_at = next_plan_time(job.plan_attempts, now)
        job.save(
            update_fields=[
                "status",
                "status_reason",
                "status_reason_text",
                "plan_attempts",
                "next_plan_at",
                "updated_at",
            ]
        )
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
    job.set_status_reason("")
    job.waiting_for = None
    job.plan_attempts, job.next_plan_at = 0, None
    job.save(
        update_fields=[
            "epoch",
            "plan",
            "quote",
            "status",
            "status_reason",
            "status_reason_text",
            "waiting_for",
            "plan_attempts",
            "next_plan_at",
            "updated_at",
        ]
    )
    migration.note_placement(job, now)
    record_event(job, JobEventKind.PLACED, placed_text(plan), data={"plan": plan.to_dict()}, now=now)


def placed_text(plan: Plan) -> StoredText:
    """ "Placed on 1× rtx-4090 + 1× tpu-v5e (ZeRO-0)", its words in the reader's language on the timeline."""
    return StoredText(PLACED, chips=plan.chip_mix(), stage=plan.zero_stage)


def start_running(job: Job, first_step: int, now: datetime) -> None:
    """The placement reported its first step (call with the job's row locked)."""
    if job.status != JobStatus.PROVISIONING:
        return
    job.status = JobStatus.RUNNING
    job.started_at = job.started_at or now
    job.save(update_fields=["status", "started_at", "updated_at"])
    if migration.record_resume(job, first_step, now) is None:
        started = StoredText(gettext_noop("Training started on %(ranks)s rank(s)"), ranks=job.plan.world_size)
        record_event(job, JobEventKind.STARTED, started, now=now)


def announce_queued(job_id: int) -> None:
    transaction.on_commit(lambda: job_queued.send(sender=Job, job_id=job_id))

"""Starverse jobs, their events and checkpoints as OpenAI's fine-tuning objects.

Statuses: queued and planning read `queued`; provisioning, running, migrating and stopping read `running`
(a stop the owner asked for reads `cancelled` at once); succeeded, failed and cancelled are themselves; a job
stopped for credit is `failed` with the error code `insufficient_credit`. Files are checked when they are
uploaded and when the job is created, so no job is ever `validating_files`. A succeeded job's
`fine_tuned_model` is `job:<id>`, the reference Starverse takes as a model (docs/FINE_TUNING.md).
"""

from __future__ import annotations

import copy
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from openai_api.objects import CHECKPOINT, EVENT, FILE, JOB, object_id, unix
from workers.models import JobCheckpoint, JobEvent
from workers.services.checkpoints import job_checkpoints
from workers.services.hyperparameters import job_hyperparameters

STATUSES = {
    JobStatus.QUEUED: "queued",
    JobStatus.PLANNING: "queued",
    JobStatus.PROVISIONING: "running",
    JobStatus.RUNNING: "running",
    JobStatus.MIGRATING: "running",
    JobStatus.STOPPING: "running",
    JobStatus.SUCCEEDED: "succeeded",
    JobStatus.FAILED: "failed",
    JobStatus.CANCELLED: "cancelled",
    JobStatus.STOPPED_NO_CREDIT: "failed",
}
ERROR_CODES = {JobStatus.FAILED: "job_failed", JobStatus.STOPPED_NO_CREDIT: "insufficient_credit"}
WARNINGS = {JobEventKind.NOTICE, JobEventKind.STOPPED, JobEventKind.WAITING, JobEventKind.CANCEL_REQUESTED}


def openai_status(job: Job) -> str:
    if job.status == JobStatus.STOPPING and job.cancel_requested_at is not None:
        return "cancelled"
    return STATUSES.get(job.status, "queued")


def fine_tuned_model(job: Job) -> str | None:
    return f"job:{job.pk}" if job.status == JobStatus.SUCCEEDED else None


def file_reference(dataset_id: int | None, fallback: str | None) -> str | None:
    return object_id(FILE, dataset_id) if dataset_id is not None else fallback


def whole(value: float | None):
    """OpenAI's epochs are integers: 2.0 reads 2, and a fraction Starverse allows stays as it is."""
    return int(value) if value is not None and float(value).is_integer() else value


def hyperparameters_of(job: Job, rate: float | None) -> dict:
    """n_epochs, batch_size (the per-device batch) and the learning rate `rate` over the job's default rate."""
    blank = copy.copy(job)
    blank.hyperparameters = {}
    default = job_hyperparameters(blank).learning_rate
    multiplier = float(f"{rate / default:.6g}") if rate and default else None
    return {
        "n_epochs": whole(job.n_epochs),
        "batch_size": job.per_device_batch_size,
        "learning_rate_multiplier": multiplier,
    }


def estimated_finish(job: Job) -> int | None:
    """While it runs: now plus the steps left at the pace of the steps so far (else the plan's time)."""
    if openai_status(job) != "running" or job.step >= job.max_steps:
        return None
    now = timezone.now()
    if job.started_at is not None and job.step:
        per_step = (now - job.started_at).total_seconds() / job.step
        return unix(now + timedelta(seconds=per_step * (job.max_steps - job.step)))
    if job.plan is not None:
        return unix(now + timedelta(seconds=job.plan.eta_seconds * (1 - job.progress)))
    return None


def job_object(job: Job) -> dict:
    status = openai_status(job)
    resolved = job_hyperparameters(job)
    hyperparameters = hyperparameters_of(job, resolved.learning_rate)
    error = None
    if job.status in ERROR_CODES:
        message = job.status_reason or "The job failed."
        error = {"code": ERROR_CODES[job.status], "message": message, "param": None}
    return {
        "id": object_id(JOB, job.pk),
        "object": "fine_tuning.job",
        "created_at": unix(job.created_at),
        "finished_at": unix(job.finished_at) if job.is_finished else None,
        "model": job.model_name,
        "fine_tuned_model": fine_tuned_model(job),
        "organization_id": f"user-{job.owner_id}",
        "result_files": [],
        "status": status,
        "training_file": file_reference(job.dataset_upload_id, job.dataset),
        "validation_file": file_reference(job.eval_dataset_upload_id, None),
        "hyperparameters": hyperparameters,
        "method": {"type": "supervised", "supervised": {"hyperparameters": hyperparameters}},
        "trained_tokens": job.tokens if job.is_finished else None,
        "error": error,
        "seed": resolved.seed if resolved.seed is not None else job.pk,  # the runtime's default: the job's id
        "estimated_finish": estimated_finish(job),
        "user_provided_suffix": job.name or None,
        "integrations": [],
        "metadata": None,
    }


def event_object(event: JobEvent) -> dict:
    level = "error" if event.kind == JobEventKind.FAILED else "warn" if event.kind in WARNINGS else "info"
    return {
        "id": object_id(EVENT, event.pk),
        "object": "fine_tuning.job.event",
        "created_at": unix(event.created_at),
        "level": level,
        "message": event.message or JobEventKind(event.kind).label,
        "data": {**{key: value for key, value in (event.data or {}).items() if key != "text"}, "kind": event.kind},
        "type": "message",
    }


def own_checkpoints(job: Job):
    """The job's checkpoint rows whose trees are its own (checkpoints/job-<id>/step-<n>)."""
    return JobCheckpoint.objects.filter(job=job, key__startswith=f"{job_checkpoints(job.pk)}/step-")


def checkpoint_object(request, row: JobCheckpoint) -> dict:
    """`fine_tuned_model_checkpoint`: where that checkpoint downloads as a Hugging Face model (Starverse has no
    model name for an intermediate checkpoint)."""
    url = reverse("job-checkpoint-download", kwargs={"pk": row.job_id, "step": row.step})
    return {
        "id": object_id(CHECKPOINT, row.pk),
        "object": "fine_tuning.job.checkpoint",
        "created_at": unix(row.created_at),
        "fine_tuning_job_id": object_id(JOB, row.job_id),
        "fine_tuned_model_checkpoint": request.build_absolute_uri(url),
        "step_number": row.step,
        "metrics": {"step": float(row.step), "train_loss": row.loss, "valid_loss": row.eval_loss},
    }

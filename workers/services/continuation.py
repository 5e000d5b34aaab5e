"""Continuing a finished job (issue #31): a new job that starts from one of its checkpoints.

`POST /api/v1/jobs/{id}/continue/` and the job page's Continue button both end in `continue_job`. The new job
is a normal job (planned, placed, billed and insured on its own) with `continued_from` set to the old one and
`start_checkpoint` to the checkpoint's key. Its step counter starts at that checkpoint's step, its plans count
the steps left (`JobSpec.start_step`), and its ranks resume from that checkpoint until it has checkpoints of
its own (`placement.resume_point`); its storage grant reads that tree (and may store its universal/ form
beside it: `storage_grants.trees_written`).

A continuation trains the same network: model, mode, LoRA settings and sequence length are the old job's
(a checkpoint's weights only load into the model it was saved from). Chips, budgets, policy, spot terms,
data, eval and hyperparameters may change.
"""

from __future__ import annotations

from dataclasses import replace

from django.db import transaction
from django.utils.translation import gettext, gettext_noop

from base.stored_text import StoredText
from fleet.choices import JobEventKind, JobStatus
from fleet.models import Job
from kernel.spec import JobSpec
from workers.models import JobCheckpoint
from workers.services.checkpoints import is_own_checkpoint
from workers.services.events import record_event
from workers.services.launch import launch

# What a continuation keeps of the old job: a checkpoint loads only into the network it was saved from.
SAME_NETWORK = (("model_name", "model"), ("mode", "mode"), ("lora", "lora"), ("seq_len", "seq_len"))


class ContinueRefused(Exception):
    """A continuation that can't go ahead: `status` (409 or 400), the `field` and `code` of the API's errors."""

    def __init__(self, status: int, field: str, code: str, message: str):
        super().__init__(message)
        self.status, self.field, self.code = status, field, code


def check_continuable(job: Job) -> None:
    """409 unless the job has ended (succeeded, failed, cancelled, or stopped for credit)."""
    if job.status not in JobStatus.finished():
        raise ContinueRefused(
            409,
            "non_field_errors",
            "job_not_finished",
            gettext(
                "Job %(id)s is %(status)s (%(code)s): only a stopped, cancelled, failed or succeeded job can be "
                "continued. Cancel it first, or wait for it to end."
            )
            % {"id": job.pk, "status": job.get_status_display().lower(), "code": job.status},
        )


def job_checkpoints_of(job: Job) -> list[JobCheckpoint]:
    """The job's own recorded checkpoints, by step."""
    return [row for row in job.checkpoints.order_by("step", "pk") if is_own_checkpoint(job.pk, row.key)]


def checkpoint_to_continue(job: Job, step: int | None = None) -> JobCheckpoint:
    """The checkpoint at `step` (None: the last one); a 400 naming `checkpoint_step` when there is none."""
    rows = job_checkpoints_of(job)
    if not rows:
        raise ContinueRefused(
            400,
            "checkpoint_step",
            "no_checkpoint",
            gettext("Job %(id)s saved no checkpoint, so there is nothing to go on from.") % {"id": job.pk},
        )
    if step is None:
        return rows[-1]
    for row in reversed(rows):
        if row.step == step:
            return row
    have = ", ".join(str(row.step) for row in rows)
    raise ContinueRefused(
        400,
        "checkpoint_step",
        "unknown_checkpoint",
        gettext("Job %(id)s has no checkpoint at step %(step)s; its checkpoints are at steps %(have)s.")
        % {"id": job.pk, "step": step, "have": have},
    )


def total_steps(job: Job, checkpoint: JobCheckpoint, max_steps: int | None, additional_steps: int | None) -> int:
    """The continuation's max_steps: given, or the checkpoint's step plus `additional_steps`, or (neither given)
    the old job's own goal when the checkpoint is short of it. A 400 on `max_steps` unless it passes the step."""
    if max_steps is not None and additional_steps is not None:
        raise ContinueRefused(
            400, "additional_steps", "invalid", gettext("Give max_steps or additional_steps, not both.")
        )
    if additional_steps is not None:
        max_steps = checkpoint.step + additional_steps
    elif max_steps is None:
        max_steps = job.max_steps
    if max_steps <= checkpoint.step:
        raise ContinueRefused(
            400,
            "max_steps",
            "invalid",
            gettext(
                "The checkpoint is at step %(step)s: max_steps (the new total) must be more than that "
                "(not %(asked)s); or give additional_steps."
            )
            % {"step": checkpoint.step, "asked": max_steps},
        )
    return max_steps


def continuation_spec(job: Job, spec: JobSpec, checkpoint: JobCheckpoint) -> JobSpec:
    """`spec` as a continuation from `checkpoint`: the same network as `job`, its steps counted from there, and
    the old plan's global batch kept (so the optimisation goes on unchanged) unless the batch size changed."""
    for column, field in SAME_NETWORK:
        if (getattr(spec, column) or None) != (getattr(job, column) or None):
            raise ContinueRefused(
                400,
                field,
                "invalid",
                gettext(
                    "A continuation trains job %(id)s's network: its checkpoint loads only into %(field)s "
                    "%(value)s. To train another model on this one's result, launch a job with model 'job:%(id)s'."
                )
                % {"id": job.pk, "field": field, "value": repr(getattr(job, column))},
            )
    same_batch = job.plan is not None and spec.per_device_batch_size == job.per_device_batch_size
    return replace(
        spec,
        n_epochs=None,
        start_step=checkpoint.step,
        global_batch=job.plan.global_batch if same_batch else None,
    )


def continue_job(owner, job: Job, spec: JobSpec, checkpoint: JobCheckpoint) -> Job:
    """Launch the continuation (raises LaunchRefused as a launch does). Its row is linked to `job` in the launch's
    transaction, before any planning pass can see it."""
    check_continuable(job)
    spec = continuation_spec(job, spec, checkpoint)
    with transaction.atomic():
        new = launch(owner, spec)
        Job.objects.filter(pk=new.pk).update(continued_from=job, start_checkpoint=checkpoint.key, step=checkpoint.step)
        new.refresh_from_db()
        record_event(
            new,
            JobEventKind.QUEUED,
            StoredText(
                gettext_noop("Continues job %(job)s from its checkpoint at step %(step)s, to step %(steps)s"),
                job=job.pk,
                step=checkpoint.step,
                steps=new.max_steps,
            ),
            data={"continued_from": job.pk, "checkpoint_step": checkpoint.step},
        )
    return new

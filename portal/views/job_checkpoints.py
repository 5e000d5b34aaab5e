"""The job page's checkpoint table: each checkpoint's step, losses, time, size and why it is kept, with its
model download and a delete button; and the retention policy above it (as the API's `checkpoints/`)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from fleet.choices import TrainingMode
from fleet.models import Job
from kernel.storage import StorageError
from workers.api.stored_files import tar_response
from workers.services.checkpoint_objects import (
    FINAL,
    LATEST,
    PRUNABLE,
    RECENT,
    STOP,
    CheckpointInUse,
    CheckpointNotExported,
    CheckpointNotFound,
    checkpoint_download,
    delete_checkpoint,
    list_checkpoints,
    retention,
)
from workers.services.model_download import MergedNotApplicable

STORAGE_DOWN = gettext_lazy("Object storage is unavailable right now; try again shortly.")
# Why pruning keeps a checkpoint, in the person's language (the API's words: workers/services/checkpoint_objects.py).
KEPT_BECAUSE = {
    FINAL: gettext_lazy("kept: the final checkpoint (the trained model)"),
    LATEST: gettext_lazy("kept: the latest, which the job resumes from"),
    STOP: gettext_lazy("kept: saved for a stop"),
    RECENT: gettext_lazy("kept: one of the newest periodic checkpoints"),
    PRUNABLE: gettext_lazy("deleted by the next pruning pass (newer periodic checkpoints replace it)"),
}


def retention_policy(keep_periodic: int, prune_every_s: int) -> str:
    """The retention policy above the table, as `Retention.policy` says it in English."""
    return gettext(
        "Each job keeps its %(keep)s newest periodic checkpoints, every stop checkpoint (a move, a credit stop), the "
        "latest one (what it resumes from) and the final one (its trained model); a pass every %(every)s s deletes "
        "the others. Kept checkpoints stay until you delete them."
    ) % {"keep": keep_periodic, "every": prune_every_s}


def checkpoint_table(job: Job) -> dict:
    """The rows of the table (newest first) and the retention policy."""
    rows = [
        {
            "row": entry.row,
            "kept": entry.kept,
            "kept_because": KEPT_BECAUSE.get(entry.kept, entry.kept_because),
            "deletable": entry.deletable,
        }
        for entry in list_checkpoints(job)
    ]
    kept = retention()
    policy = retention_policy(kept.keep_periodic, kept.prune_every_s)
    return {"rows": rows, "retention": {"policy": policy}, "lora": job.mode == TrainingMode.LORA}


def owned_job(request: HttpRequest, pk: int) -> Job:
    return get_object_or_404(Job, pk=pk, owner=request.user)


@login_required
def job_checkpoint_model(request: HttpRequest, pk: int, step: int) -> StreamingHttpResponse:
    """A checkpoint's model as one tar, as the API's `checkpoints/{step}/download/`."""
    job = owned_job(request, pk)
    try:
        download = checkpoint_download(job, step, merged=request.GET.get("merged") in ("1", "true"))
    except (CheckpointNotFound, CheckpointNotExported, MergedNotApplicable) as error:
        raise Http404(str(error)) from None
    except StorageError:
        return HttpResponse(str(STORAGE_DOWN), status=503, content_type="text/plain")
    return tar_response(download)


@require_POST
@login_required
def job_checkpoint_delete(request: HttpRequest, pk: int, step: int) -> HttpResponse:
    """Delete one checkpoint; the page says what happened (or why not) at the top."""
    job = owned_job(request, pk)
    try:
        delete_checkpoint(job, step)
        messages.success(
            request, gettext("Checkpoint at step %(step)s of job %(job)s deleted.") % {"step": step, "job": job.pk}
        )
    except (CheckpointNotFound, CheckpointInUse) as error:
        messages.error(request, str(error))
    except StorageError:
        messages.error(request, STORAGE_DOWN)
    target = reverse("job", args=[job.pk])
    return HttpResponseClientRedirect(target) if request.htmx else redirect(target)

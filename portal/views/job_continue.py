"""The job page's Continue button (#31): a finished job goes on from its last checkpoint as a new job, through the
same validation and service as `POST /api/v1/jobs/{id}/continue/` (workers/api/continue_views.py)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext
from django.views.decorators.http import require_POST
from rest_framework.exceptions import APIException, ValidationError

from fleet.models import Job
from workers.api.continue_views import continue_from_request


def refusal_text(error: APIException) -> str:
    """A refusal as one sentence per field, as the page shows it."""
    if isinstance(error, ValidationError) and isinstance(error.detail, dict):
        return " ".join(str(item) for errors in error.detail.values() for item in errors)
    return str(error.detail)


@require_POST
@login_required
def job_continue(request: HttpRequest, pk: int) -> HttpResponse:
    """Continue the user's job: `additional_steps` (optional) past its last checkpoint, everything else as it was;
    the new job's page, or back to this one saying why not."""
    job = get_object_or_404(Job, pk=pk, owner=request.user)
    data = {"additional_steps": request.POST["additional_steps"]} if request.POST.get("additional_steps") else {}
    try:
        new = continue_from_request(request, job, data)
    except APIException as error:
        messages.error(
            request, gettext("Job %(job)s can't be continued: %(why)s") % {"job": job.pk, "why": refusal_text(error)}
        )
        return redirect("job", job.pk)
    messages.success(
        request,
        gettext("Job %(job)s continues job %(original)s from step %(step)s.")
        % {"job": new.pk, "original": job.pk, "step": new.step},
    )
    return redirect("job", new.pk)

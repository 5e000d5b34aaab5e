"""A user's training jobs: the list, the live job page and its partials, metrics, cancel and artifacts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from base.money import format_price
from portal.views.training import format_duration, format_rate, summarize_plan
from workers.api.stored_files import stored_file_response
from workers.choices import AllocationMode, JobStatus, TrainingMode
from workers.models import ChipType, Job
from workers.services import metrics
from workers.services.artifacts import list_artifacts, stored_artifact
from workers.services.lifecycle import cancel as cancel_job
from workers.services.model_download import (
    ADAPTER_DIR,
    MODEL_DIR,
    MergedNotApplicable,
    ModelNotReady,
    exported_step,
    load_lines,
    model_download,
)
from workers.storage import StorageError

STORAGE_DOWN = "Object storage is unavailable right now; try again shortly."
JOBS_PAGE_SIZE = 20
LOG_TAIL = 100
EVENT_LIMIT = 50
# The API's cap on metric rows per request: enough for 2,500 steps of an 8-rank job.
REASON_TONES = {
    JobStatus.FAILED: "error",
    JobStatus.STOPPED_NO_CREDIT: "error",
    JobStatus.SUCCEEDED: "success",
    JobStatus.QUEUED: "warning",
}


@dataclass(frozen=True)
class RankRow:
    """One rank of the job's current placement, planned against measured."""

    rank: int
    slug: str
    chip: str
    hostname: str
    mode: str
    micro_batch: int
    planned: str
    measured: str
    paced: str
    simulated: bool


def owned_job(request: HttpRequest, pk: int) -> Job:
    """The user's job, or 404: another user's job looks exactly like one that doesn't exist."""
    return get_object_or_404(Job, pk=pk, owner=request.user)


def rank_rows(job: Job, names: dict[str, str]) -> list[RankRow]:
    modes = dict(AllocationMode.choices)
    paced = {index: rank.paced_tokens_per_s for index, rank in enumerate(job.plan.ranks if job.plan else [])}
    return [
        RankRow(
            rank=row["rank"],
            slug=row["chip"],
            chip=names.get(row["chip"], row["chip"]),
            hostname=row["hostname"] or "—",
            mode=modes.get(row["mode"], row["mode"] or "—"),
            micro_batch=row["micro_batch"],
            planned=format_rate(row["planned_tokens_per_s"]),
            measured=format_rate(row["measured_tokens_per_s"]),
            paced=format_rate(paced[row["rank"]]),
            simulated=row["simulated"],
        )
        for row in metrics.rank_table(job)
    ]


def eta_seconds(job: Job, now: datetime) -> float | None:
    """Time left: from the measured tokens/s, else the step rate so far, else the plan's estimate."""
    if job.is_finished or job.step >= job.max_steps:
        return None
    remaining = job.max_steps - job.step
    tokens_per_step = job.plan.tokens_per_step if job.plan else None
    if job.tokens_per_s and tokens_per_step:
        return remaining * tokens_per_step / job.tokens_per_s
    if job.started_at and job.step:
        return (now - job.started_at).total_seconds() / job.step * remaining
    if job.plan:
        return job.plan.eta_seconds * (1 - job.progress)
    return None


def job_context(job: Job, now: datetime | None = None) -> dict:
    now = now or timezone.now()
    names = dict(ChipType.objects.values_list("slug", "name"))
    events = list(job.events.order_by("-created_at", "-id")[:EVENT_LIMIT])
    started = job.started_at
    return {
        "job": job,
        "live": not job.is_finished,
        "can_cancel": not job.is_finished and job.cancel_requested_at is None,
        "reason_tone": REASON_TONES.get(job.status, "info"),
        "percent": int(job.progress * 100),
        "eta": format_duration(eta) if (eta := eta_seconds(job, now)) is not None else "",
        "elapsed": format_duration(((job.finished_at or now) - started).total_seconds()) if started else "",
        "tokens_per_s": format_rate(job.tokens_per_s),
        "tokens": format_rate(job.tokens) if job.tokens else "0",
        "budget": format_price(job.max_budget_per_hour),
        "plan": summarize_plan(job.plan, names),
        "ranks": rank_rows(job, names),
        "events": events,
        "event_count": job.events.count() if len(events) == EVENT_LIMIT else len(events),
        "logs": list(reversed(job.log_lines.order_by("-id")[:LOG_TAIL])),
        "artifacts": list_artifacts(job),
        "model": model_links(job),
    }


def model_links(job: Job) -> dict | None:
    """The Download model box: what can be downloaded and the three lines that load it."""
    try:
        if exported_step(job) is None:
            return None
    except StorageError:
        return None  # shown again once storage answers
    lora = job.mode == TrainingMode.LORA
    return {
        "lora": lora,
        "load": "\n".join(load_lines(job, ADAPTER_DIR if lora else MODEL_DIR)),
        "load_merged": "\n".join(load_lines(job, MODEL_DIR)) if lora else "",
    }


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    jobs = Job.objects.filter(owner=request.user).order_by("-created_at", "-id")
    page = Paginator(jobs, JOBS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "portal/training/jobs.html", {"page": page, "jobs": page.object_list})


@login_required
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return render(request, "portal/training/job.html", job_context(owned_job(request, pk)))


@never_cache
@login_required
def job_live(request: HttpRequest, pk: int) -> HttpResponse:
    """Every live section of the job page at once, swapped in out of band; polling stops once it ends."""
    return render(request, "partials/training/job_live.html", job_context(owned_job(request, pk)))


@never_cache
@login_required
def job_metrics(request: HttpRequest, pk: int) -> HttpResponse:
    """Per step: the loss and the job's tokens/s; per rank: the chip table (the API's `metrics` shape)."""
    job = owned_job(request, pk)
    try:
        since = int(request.GET.get("since_step") or 0)
    except ValueError:
        return HttpResponseBadRequest("since_step must be an integer.")
    return JsonResponse(metrics.job_metrics(job, since))


@require_POST
@login_required
def job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    job = cancel_job(owned_job(request, pk))
    if request.htmx:
        return render(request, "partials/training/job_live.html", job_context(job))
    messages.success(request, f"Job {job.pk}: {job.get_status_display().lower()}.")
    return redirect("job", job.pk)


@login_required
def job_model(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """The trained model as one tar (`?merged=1`: a LoRA job's merged weights), as the API's `model/`."""
    job = owned_job(request, pk)
    try:
        download = model_download(job, merged=request.GET.get("merged") in ("1", "true"))
    except (ModelNotReady, MergedNotApplicable) as error:
        raise Http404(str(error)) from None
    except StorageError:
        return HttpResponse(STORAGE_DOWN, status=503, content_type="text/plain")
    response = StreamingHttpResponse(download.stream(), content_type="application/x-tar")
    response["Content-Disposition"] = f'attachment; filename="{download.filename}"'
    return response


@login_required
def job_artifact(request: HttpRequest, pk: int, path: str) -> HttpResponse:
    """One file of the job's checkpoints, for its owner: a redirect to a presigned URL, or the file."""
    job = owned_job(request, pk)
    try:
        found = stored_artifact(job, path)
        if found is None:
            raise Http404("No such artifact.")
        return stored_file_response(found.key, f"job-{job.pk}-{path.replace('/', '-')}")
    except StorageError:
        return HttpResponse(STORAGE_DOWN, status=503, content_type="text/plain")

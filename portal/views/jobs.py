"""A user's training jobs: the list (cost, re-run, cancel), the live job page and its partials, logs, metrics,
cancel and artifacts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models.functions import Coalesce
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from base.formatting import format_duration, format_rate
from billing.services.statements import charged_of_job
from fleet.choices import AllocationMode, JobStatus, TrainingMode
from fleet.models import ChipType, Job
from kernel.money import format_price
from kernel.storage import StorageError
from portal.views.job_checkpoints import checkpoint_table
from portal.views.job_islands import island_rows, sync_summary
from portal.views.job_log_view import log_context, log_groups, log_query
from portal.views.job_recipe import recipe_rows
from portal.views.training import summarize_plan
from workers.api.continue_views import job_spec_data as rerun_data
from workers.api.job_spec import JobSpecSerializer
from workers.api.stored_files import stored_file_response
from workers.services import job_logs, metrics
from workers.services.artifacts import group_artifacts, list_artifacts, stored_artifact
from workers.services.events import timeline
from workers.services.launch import LaunchRefused, launch
from workers.services.lifecycle import cancel as cancel_job
from workers.services.model_download import (
    ADAPTER_DIR,
    MODEL_DIR,
    MergedNotApplicable,
    ModelNotReady,
    download_folder,
    exported_step,
    load_lines,
    model_download,
)
from workers.services.tensorboard_download import TensorBoardNotReady, tensorboard_download

STORAGE_DOWN = gettext_lazy("Object storage is unavailable right now; try again shortly.")
JOBS_PAGE_SIZE = 20
FOLLOW_LINES = 500  # the most new log lines one poll of a followed log brings
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
    """What every live section of the job page needs (the log view has its own: `log_context`)."""
    now = now or timezone.now()
    names = dict(ChipType.objects.values_list("slug", "name"))
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
        "islands": island_rows(job),
        "sync": sync_summary(job),
        "timeline": timeline(job),
        "artifacts": group_artifacts(list_artifacts(job)),
        "checkpoints": checkpoint_table(job),
        "recipe": recipe_rows(job),
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
    which = ADAPTER_DIR if lora else MODEL_DIR
    return {
        "lora": lora,
        "folder": download_folder(job, which),
        "load": "\n".join(load_lines(job, which)),
        "merged_folder": download_folder(job, MODEL_DIR) if lora else "",
        "load_merged": "\n".join(load_lines(job, MODEL_DIR)) if lora else "",
    }


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """The user's jobs, newest first, each with its cost so far (summed in the query: no query per row)."""
    jobs = (
        Job.objects.filter(owner=request.user, deployment__isnull=True)  # replicas show on their deployment
        .annotate(cost=Coalesce(charged_of_job(), 0))
        .order_by("-created_at", "-id")
    )
    page = Paginator(jobs, JOBS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "portal/training/jobs.html", {"page": page, "jobs": page.object_list})


@login_required
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The job page; `search`, `before` and `after` pick its log view's page (the links work without script)."""
    job = owned_job(request, pk)
    try:
        query = log_query(request.GET)
        logs = log_context(job, query)
    except job_logs.LogQueryError as error:
        return HttpResponseBadRequest(str(error))
    return render(request, "portal/training/job.html", {**job_context(job), **logs})


@never_cache
@login_required
def job_live(request: HttpRequest, pk: int) -> HttpResponse:
    """Every live section of the job page at once, swapped in out of band; polling stops once it ends."""
    context = job_context(owned_job(request, pk))
    return render(request, "partials/training/job_live.html", {**context, "swap_poller": not context["live"]})


@never_cache
@login_required
def job_logs_view(request: HttpRequest, pk: int) -> HttpResponse:
    """The job page's log view: a page (`before`/`after` a line id, `search`), or with `since` the lines that
    arrived after that id, for a followed log (appended, with the follower's next cursor out of band)."""
    job = owned_job(request, pk)
    try:
        query = log_query(request.GET)
        since = job_logs.clean_cursor("since", request.GET.get("since"))
        if since is None:
            return render(request, "partials/training/job_log_view.html", log_context(job, query))
    except job_logs.LogQueryError as error:
        return HttpResponseBadRequest(str(error))
    search = query["search"]
    lines = job_logs.lines_after(job, since, search=search, limit=FOLLOW_LINES)
    context = {
        "job": job,
        "live": not job.is_finished,
        "log_groups": log_groups(lines, search),
        "search": search,
        "cursor": lines[-1].pk if lines else since,
        # A finished job's log is complete once a poll brings nothing new: the follower stops.
        "following": bool(lines) or not job.is_finished,
    }
    if lines:  # the summary's count, brought up to date out of band
        total = job_logs.matching(job, search).count()
        context["log"] = job_logs.LogPage([], search, total, has_older=False, has_newer=False, follow=True)
    return render(request, "partials/training/job_log_follow.html", context)


@never_cache
@login_required
def job_metrics(request: HttpRequest, pk: int) -> HttpResponse:
    """Per step: the loss and the job's tokens/s; per rank: the chip table (the API's `metrics` shape)."""
    job = owned_job(request, pk)
    try:
        since = int(request.GET.get("since_step") or 0)
    except ValueError:
        return HttpResponseBadRequest(gettext("since_step must be an integer."))
    return JsonResponse(metrics.job_metrics(job, since))


@require_POST
@login_required
def job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel from the job page (its live sections come back, out of band) or from the jobs list (`next=jobs`:
    back to the list)."""
    job = cancel_job(owned_job(request, pk))
    from_list = request.POST.get("next") == "jobs"
    if request.htmx and not from_list:
        # The poller is left alone: swapping it while its own request is in flight would leave that response
        # without its page (htmx:oobErrorNoTarget); its next poll stops it once the job has ended.
        return render(request, "partials/training/job_live.html", job_context(job))
    messages.success(request, cancel_message(job))
    if from_list:
        return HttpResponseClientRedirect(reverse("jobs")) if request.htmx else redirect("jobs")
    return redirect("job", job.pk)


def cancel_message(job: Job) -> str:
    if job.is_finished:
        return gettext("Job %(job)s is %(status)s.") % {"job": job.pk, "status": job.get_status_display().lower()}
    return gettext("Job %(job)s is stopping: its chips are let go as its ranks exit.") % {"job": job.pk}


@require_POST
@login_required
def job_rerun(request: HttpRequest, pk: int) -> HttpResponse:
    """A new job with the same settings, validated and launched as the API launches one; a refusal (a dataset
    since deleted, a balance too low) goes back to the jobs list with the reason."""
    original = owned_job(request, pk)
    spec = JobSpecSerializer(data=rerun_data(original), context={"request": request})
    job = None
    if not spec.is_valid():
        problems = "; ".join(f"{field}: {' '.join(map(str, errors))}" for field, errors in spec.errors.items())
        messages.error(
            request,
            gettext("Job %(job)s can't be run again as it was: %(problems)s")
            % {"job": original.pk, "problems": problems},
        )
    else:
        try:
            job = launch(request.user, spec.job_spec())
        except LaunchRefused as error:
            messages.error(
                request, gettext("Job %(job)s can't be run again now: %(error)s") % {"job": original.pk, "error": error}
            )
    if job is None:
        return HttpResponseClientRedirect(reverse("jobs")) if request.htmx else redirect("jobs")
    messages.success(
        request,
        gettext("Job %(job)s started with the settings of job %(original)s.")
        % {"job": job.pk, "original": original.pk},
    )
    target = reverse("job", args=[job.pk])
    return HttpResponseClientRedirect(target) if request.htmx else redirect(target)


@login_required
def job_model(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """The trained model as one tar (`?merged=1`: a LoRA job's merged weights), as the API's `model/`."""
    job = owned_job(request, pk)
    try:
        download = model_download(job, merged=request.GET.get("merged") in ("1", "true"))
    except (ModelNotReady, MergedNotApplicable) as error:
        raise Http404(str(error)) from None
    except StorageError:
        return HttpResponse(str(STORAGE_DOWN), status=503, content_type="text/plain")
    response = StreamingHttpResponse(download.stream(), content_type="application/x-tar")
    response["Content-Disposition"] = f'attachment; filename="{download.filename}"'
    return response


@login_required
def job_tensorboard(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """The run's TensorBoard event files as one tar, as the API's `tensorboard/`."""
    job = owned_job(request, pk)
    try:
        download = tensorboard_download(job)
    except TensorBoardNotReady as error:
        raise Http404(str(error)) from None
    except StorageError:
        return HttpResponse(str(STORAGE_DOWN), status=503, content_type="text/plain")
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
            raise Http404(gettext("No such artifact."))
        return stored_file_response(found.key, f"job-{job.pk}-{path.replace('/', '-')}")
    except StorageError:
        return HttpResponse(str(STORAGE_DOWN), status=503, content_type="text/plain")

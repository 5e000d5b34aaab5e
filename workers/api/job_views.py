"""Jobs, quotes and datasets in the v1 API; every list and detail is scoped to its owner."""

from __future__ import annotations

from django.http import Http404, StreamingHttpResponse
from django.urls import reverse
from django.utils.translation import gettext
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ErrorDetail, NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.docs import (
    IDEMPOTENT_WRITE_ERRORS,
    READ_ERRORS,
    VALIDATION_EXAMPLE,
    WRITE_ERRORS,
    errors,
)
from base.api.idempotency import IDEMPOTENCY_KEY_PARAMETER, idempotent
from base.api.validation import refuse_unknown_fields
from base.prepared import PreparedPage, PreparedQuery, prefetched
from billing.services.statements import charged_of_job
from fleet.models import Job
from kernel import planner
from kernel.spec import JobSpec
from kernel.storage import StorageError
from workers.api import job_docs as docs
from workers.api import job_serializers as s
from workers.api import job_spec
from workers.api.stored_files import StorageDown, stored_file_response
from workers.models import JobMigration
from workers.services import job_logs
from workers.services.artifacts import list_artifacts, stored_artifact
from workers.services.epochs import EpochsRefused, with_epochs
from workers.services.launch import LaunchRefused, fleet_refusal, launch, refusal_of
from workers.services.lifecycle import cancel as cancel_job
from workers.services.metrics import job_metrics
from workers.services.model_download import MergedNotApplicable, ModelNotReady, model_download
from workers.services.planning import quote
from workers.services.tensorboard_download import TensorBoardNotReady, tensorboard_download

AUTH_ERRORS_LIST = (401, 429)


def launch_error(error: LaunchRefused) -> ValidationError:
    """A refused launch as a 400 naming the field, with its code (the SDK's typed errors)."""
    return ValidationError({error.field: [ErrorDetail(str(error), code=error.code)]})


def planning_error(error: planner.PlanningError) -> ValidationError:
    return launch_error(refusal_of(error))


def quote_or_400(spec: JobSpec) -> planner.Plan:
    """The plan on the chips free now; without them, a 400 that says whether the job could still queue."""
    try:
        return quote(spec)
    except planner.NoCapacity as error:
        never = fleet_refusal(spec)
        if never is not None:
            raise launch_error(never) from None
        waits = ValidationError(
            {
                "chip_counts": [
                    ErrorDetail(
                        gettext("%(reason)s A job launched now waits in the queue.") % {"reason": refusal_of(error)},
                        code="no_capacity",
                    )
                ]
            }
        )
        raise waits from None
    except planner.PlanningError as error:
        raise planning_error(error) from None


def valid_spec(request) -> job_spec.JobSpecSerializer:
    spec = job_spec.JobSpecSerializer(data=request.data, context={"request": request})
    refuse_unknown_fields(spec, read_only=[*s.JobSerializer().fields, "owner"])
    spec.is_valid(raise_exception=True)
    return spec


def artifact_url(request, job: Job, relative: str) -> str:
    """Where `artifact` serves a file of the job: its path (percent-encoded by reverse), no trailing slash."""
    return request.build_absolute_uri(reverse("job-artifact", kwargs={"pk": job.pk, "path": relative}))


def jobs_of(owner, status: str | None = None):
    """A user's jobs, newest first, each with what it was charged (the list page's rows)."""
    jobs = Job.objects.filter(owner=owner).annotate(charged=charged_of_job()).order_by("-created_at", "-id")
    return jobs.filter(status=status) if status is not None else jobs


def training_jobs_of(owner, status: str | None = None):
    """The list's jobs: a deployment's replicas (serving jobs) are listed with their deployment, not here."""
    return jobs_of(owner, status).filter(deployment__isnull=True)


# The list page's queries, compiled once (base.prepared).
JOB_PAGE = PreparedQuery(training_jobs_of, owner=int, status=str)
MIGRATIONS_OF_JOBS = PreparedQuery(lambda jobs: JobMigration.objects.filter(job_id__any_of=jobs), jobs=list)


def with_migrations(jobs: list[Job]) -> None:
    prefetched(jobs, "migrations", MIGRATIONS_OF_JOBS.rows(jobs=[job.pk for job in jobs]), key="job_id")


def int_param(request, name: str, default: int) -> int:
    try:
        return int(request.query_params.get(name) or default)
    except ValueError:
        raise ValidationError({name: [gettext("Must be an integer.")]}) from None


class QuoteView(APIView):
    """The plan a job would get now, with the best single-chip-type plan beside it."""

    @extend_schema(
        summary="Quote a job",
        description=(
            "Plans the job spec against the chips free now and answers the plan: chips per type, tokens/s, "
            "price per hour, ETA and total cost, with the best single-chip-type plan as `baseline`. Nothing "
            "is reserved or charged. 400 names the field: `model` (fits no chip), `max_budget` (no plan "
            "within it), `chip_counts` (`no_capacity`: no free chips now, so a job would queue; or the "
            "enrolled fleet could never place it), or any unknown field."
        ),
        request=job_spec.JobSpecSerializer,
        responses={200: docs.PlanDocSerializer, **errors(*WRITE_ERRORS)},
        examples=[docs.SPEC_EXAMPLE, docs.PLAN_EXAMPLE, VALIDATION_EXAMPLE],
    )
    def post(self, request):
        spec = valid_spec(request)
        try:
            _, plan = with_epochs(spec.job_spec(), quote_or_400)
        except EpochsRefused as error:
            raise ValidationError({"n_epochs": [ErrorDetail(str(error), code="invalid")]}) from None
        return Response(job_spec.format_plan(plan))


@extend_schema_view(
    list=extend_schema(
        summary="List your jobs",
        description=(
            "Your jobs, newest first, paginated; `?status=running` filters by status. A deployment's replicas "
            "(serving jobs) are listed with their deployment (`/api/v1/deployments/`), not here."
        ),
        parameters=[OpenApiParameter("status", str, description="queued, planning, running, succeeded, ...")],
        responses={200: s.JobSerializer(many=True), **errors(*AUTH_ERRORS_LIST)},
    ),
    retrieve=extend_schema(
        summary="Get a job",
        description="Status, progress, loss, throughput and plan of one of your jobs.",
        responses={200: s.JobSerializer, **errors(*READ_ERRORS)},
    ),
)
class JobViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Submit, list, follow and cancel training runs."""

    serializer_class = s.JobSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Job.objects.none()
        owner, status_filter = self.request.user, self.request.query_params.get("status") or None
        if self.action == "list":  # the page's own query with the cost in it, then the page's migrations
            return PreparedPage(JOB_PAGE, then=with_migrations, owner=owner.pk, status=status_filter)
        return jobs_of(owner, status_filter).prefetch_related("migrations")

    @extend_schema(
        summary="Submit a job",
        description=(
            "Validates and quotes the spec, checks that your balance holds a few minutes of the plan on top "
            "of what your queued jobs and bids already hold, and queues the job; it is planned and placed "
            "within seconds. A job that waits for free chips is queued too (and holds its credit while it "
            "waits); one the enrolled fleet could never place is refused (`no_capacity`). 400 names the "
            "field and a code: `balance` (`insufficient_credit`), `total_budget` (`budget_too_low`: not "
            "more than the stop margin's spend), `non_field_errors` (`too_many_queued`: the cap on jobs "
            "waiting at once). Send an `Idempotency-Key` so that a retry can't start a second job."
        ),
        request=job_spec.JobSpecSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: s.JobSerializer, **errors(*IDEMPOTENT_WRITE_ERRORS)},
        examples=[docs.SPEC_EXAMPLE, VALIDATION_EXAMPLE],
    )
    @idempotent
    def create(self, request):
        spec = valid_spec(request)
        try:
            job = launch(request.user, spec.job_spec())
        except LaunchRefused as error:
            raise launch_error(error) from None
        return Response(s.JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Cancel a job",
        description=(
            "A queued job ends at once; a running one is told to stop (status `stopping`, then `cancelled`). "
            "Cancelling a finished job changes nothing and answers it as it is."
        ),
        request=None,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={200: s.JobSerializer, **errors(*READ_ERRORS, 403, 409, 422)},
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request, pk=None):
        job = cancel_job(self.get_object())
        return Response(s.JobSerializer(job).data)

    @extend_schema(
        summary="Training metrics of a job",
        parameters=[OpenApiParameter("since_step", int, description="Only steps after this one (for polling).")],
        responses={200: docs.MetricsDocSerializer, **errors(400, *READ_ERRORS)},
    )
    @action(detail=True)
    def metrics(self, request, pk=None):
        """Per step: the global loss and the job's tokens/s; per rank: chip, micro-batch and tokens/s."""
        job = self.get_object()
        try:
            since = int(request.query_params.get("since_step") or 0)
        except ValueError:
            raise ValidationError({"since_step": [gettext("Must be an integer.")]}) from None
        return Response(job_metrics(job, since))

    @extend_schema(
        summary="Event timeline of a job",
        description="Queued, planned, placed, migrated, checkpointed, stopped...: what happened, oldest first.",
        responses={200: s.JobEventSerializer(many=True), **errors(*READ_ERRORS)},
    )
    @action(detail=True, pagination_class=None)
    def events(self, request, pk=None):
        job = self.get_object()
        return Response(s.JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(
        summary="Log lines of a job",
        description=(
            "The ranks' output, oldest first. Follow a job by passing the last `id` you saw as `after`; page "
            "back with `before` (the first `id` of the page you have), or get the newest lines with `tail=true`. "
            "`search` keeps the lines containing it, case-insensitively (at most 200 characters; `%` and `_` "
            "match themselves)."
        ),
        parameters=[
            OpenApiParameter("after", int, description="Only lines with a greater id (the oldest of them first)."),
            OpenApiParameter("before", int, description="Only lines with a smaller id: the newest `limit` of them."),
            OpenApiParameter("tail", bool, description="The newest `limit` lines (with `search`: matching ones)."),
            OpenApiParameter("search", str, description="Only lines containing this text, ignoring case."),
            OpenApiParameter("limit", int, description="At most this many lines (1-1000, default 200)."),
        ],
        responses={200: s.JobLogLineSerializer(many=True), **errors(400, *READ_ERRORS)},
    )
    @action(detail=True, pagination_class=None)
    def logs(self, request, pk=None):
        job = self.get_object()
        limit = max(1, min(job_logs.MAX_LINES, int_param(request, "limit", 200)))
        params = request.query_params
        try:
            search = job_logs.clean_search(params.get("search"))
            after = job_logs.clean_cursor("after", params.get("after"))
            before = job_logs.clean_cursor("before", params.get("before"))
        except job_logs.LogQueryError as error:
            raise ValidationError({error.field: [str(error)]}) from None
        tail = params.get("tail", "").lower() in ("1", "true", "yes")
        if sum((after is not None, before is not None, tail)) > 1:
            raise ValidationError({"before": [gettext("Give one of after, before and tail.")]})
        if before is not None or tail:
            lines = job_logs.lines_before(job, before, search=search, limit=limit)
        else:
            lines = job_logs.lines_after(job, after or 0, search=search, limit=limit)
        return Response(s.JobLogLineSerializer(lines, many=True).data)

    @extend_schema(
        summary="Checkpoints and final model of a job",
        responses={200: docs.ArtifactDocSerializer(many=True), **errors(*READ_ERRORS)},
    )
    @action(detail=True, pagination_class=None)
    def artifacts(self, request, pk=None):
        job = self.get_object()
        return Response([{**a.__dict__, "url": artifact_url(request, job, a.path)} for a in list_artifacts(job)])

    @extend_schema(
        summary="Download the trained model",
        description=(
            "The final (or stop) model in Hugging Face format as one tar: config.json, generation_config.json, "
            "model.safetensors (sharded with an index when large), the tokenizer files and a README.md model card. "
            "A LoRA job sends its peft adapter (adapter_config.json, adapter_model.safetensors); `merged=true` "
            "sends the base model with the adapter merged in. 404 `model_not_ready` while none is exported."
        ),
        parameters=[OpenApiParameter("merged", bool, description="LoRA jobs: the merged full weights.")],
        responses={(200, "application/x-tar"): OpenApiTypes.BINARY, **errors(400, *READ_ERRORS)},
    )
    @action(detail=True, url_path="model")
    def model(self, request, pk=None):
        merged = request.query_params.get("merged", "").lower() in ("1", "true", "yes")
        try:
            download = model_download(self.get_object(), merged=merged)
        except MergedNotApplicable as error:
            raise ValidationError({"merged": [str(error)]}, code="merged_not_applicable") from None
        except ModelNotReady as error:
            raise NotFound(str(error), code="model_not_ready") from None
        except StorageError as error:
            raise StorageDown() from error
        response = StreamingHttpResponse(download.stream(), content_type="application/x-tar")
        response["Content-Disposition"] = f'attachment; filename="{download.filename}"'
        return response

    @extend_schema(
        summary="Download the TensorBoard event files",
        description=(
            "The run's TensorBoard event files (train/loss, train/lr, train/grad_norm, train/tokens_per_s, "
            "eval/loss, written by the rank that logs) as one tar unpacking to `job-<id>-tensorboard/epoch-<n>/`, "
            "one folder per placement: `tensorboard --logdir job-<id>-tensorboard`. They are stored at every "
            "checkpoint and at the end; 404 `tensorboard_not_ready` before the first."
        ),
        responses={(200, "application/x-tar"): OpenApiTypes.BINARY, **errors(*READ_ERRORS)},
    )
    @action(detail=True, url_path="tensorboard")
    def tensorboard(self, request, pk=None):
        try:
            download = tensorboard_download(self.get_object())  # the owner's job, or 404
        except TensorBoardNotReady as error:
            raise NotFound(str(error), code="tensorboard_not_ready") from None
        except StorageError as error:
            raise StorageDown() from error
        response = StreamingHttpResponse(download.stream(), content_type="application/x-tar")
        response["Content-Disposition"] = f'attachment; filename="{download.filename}"'
        return response

    @extend_schema(
        summary="Download an artifact",
        description=(
            "The file at a `url` that `artifacts/` lists, e.g. `step-100/model/config.json`. Where the platform "
            "keeps files in S3 the answer is a 302 to a presigned URL valid for 5 minutes (follow redirects); "
            "otherwise the file itself."
        ),
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            302: OpenApiResponse(description="Download from the `Location` URL (short-lived)."),
            **errors(*READ_ERRORS),
        },
        operation_id="jobs_artifact_download",
    )
    def artifact(self, request, pk=None, path=""):
        """Routed by workers/api/urls.py, not @action: the router would demand a trailing slash after the
        file name and read `.json`/`.pt` as a format suffix."""
        job = self.get_object()  # the owner's, or 404
        try:
            found = stored_artifact(job, path)
            if found is None:
                raise Http404(gettext("No such artifact."))
            return stored_file_response(found.key, found.filename)
        except StorageError as error:
            raise StorageDown() from error

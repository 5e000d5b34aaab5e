"""Jobs, quotes and datasets in the v1 API; every list and detail is scoped to its owner."""

from __future__ import annotations

from django.http import FileResponse, Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.services.holds import HoldRefused, check_hold
from workers import planner
from workers.api import job_serializers as s
from workers.models import Dataset, Job
from workers.services.artifacts import artifact_file, list_artifacts
from workers.services.datasets import DatasetRejected, store_dataset
from workers.services.jobs import cancel_job, submit_job
from workers.services.metrics import job_metrics
from workers.services.planning import quote

PLANNING_FIELD = {
    planner.ModelDoesNotFit: "model",
    planner.BudgetTooLow: "max_budget",
    planner.NoCapacity: "chip_counts",
    planner.InvalidRequest: "non_field_errors",
}


def quote_or_400(fields: dict, *, capacity_is_error: bool = True) -> dict | None:
    try:
        return quote(fields)
    except planner.NoCapacity:
        if capacity_is_error:
            raise
        return None
    except planner.PlanningError as error:
        raise ValidationError({PLANNING_FIELD.get(type(error), "non_field_errors"): [str(error)]}) from None


class QuoteView(APIView):
    """The plan a job would get now, with the best single-chip-type plan beside it."""

    @extend_schema(request=s.JobSpecSerializer, responses={200: dict})
    def post(self, request):
        spec = s.JobSpecSerializer(data=request.data, context={"request": request})
        spec.is_valid(raise_exception=True)
        try:
            plan = quote_or_400(spec.job_fields())
        except planner.NoCapacity as error:
            raise ValidationError({"chip_counts": [str(error)]}) from None
        return Response(s.format_plan(plan))


class JobViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Submit, list, follow and cancel training runs."""

    serializer_class = s.JobSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Job.objects.none()
        jobs = Job.objects.filter(owner=self.request.user)
        if status_filter := self.request.query_params.get("status"):
            jobs = jobs.filter(status=status_filter)
        return jobs

    @extend_schema(request=s.JobSpecSerializer, responses={201: s.JobSerializer})
    def create(self, request):
        spec = s.JobSpecSerializer(data=request.data, context={"request": request})
        spec.is_valid(raise_exception=True)
        fields = spec.job_fields()
        plan = quote_or_400(fields, capacity_is_error=False)  # refuse what can never run; queue what waits for chips
        if plan is not None:  # a job waiting for chips is held at placement instead
            try:
                check_hold(request.user, plan["price_per_hour"])
            except HoldRefused as error:
                raise ValidationError({"balance": [str(error)]}) from None
        job = submit_job(request.user, **fields)
        return Response(s.JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = cancel_job(self.get_object())
        return Response(s.JobSerializer(job).data)

    @extend_schema(parameters=[OpenApiParameter("since_step", int)], responses={200: dict})
    @action(detail=True)
    def metrics(self, request, pk=None):
        """Per step: the global loss and the job's tokens/s; per rank: chip, micro-batch and tokens/s."""
        job = self.get_object()
        try:
            since = int(request.query_params.get("since_step") or 0)
        except ValueError:
            raise ValidationError({"since_step": ["Must be an integer."]}) from None
        return Response(job_metrics(job, since))

    @action(detail=True)
    def events(self, request, pk=None):
        job = self.get_object()
        return Response(s.JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(parameters=[OpenApiParameter("after", int), OpenApiParameter("limit", int)])
    @action(detail=True)
    def logs(self, request, pk=None):
        job = self.get_object()
        after = int(request.query_params.get("after") or 0)
        limit = max(1, min(1000, int(request.query_params.get("limit") or 200)))
        lines = job.log_lines.filter(pk__gt=after).order_by("id")[:limit]
        return Response(s.JobLogLineSerializer(lines, many=True).data)

    @action(detail=True)
    def artifacts(self, request, pk=None):
        job = self.get_object()
        base = request.build_absolute_uri(f"/api/v1/jobs/{job.pk}/artifacts/")
        return Response([{**a.__dict__, "url": base + a.path} for a in list_artifacts(job)])

    @extend_schema(responses={(200, "application/octet-stream"): bytes}, operation_id="jobs_artifact_download")
    @action(detail=True, url_path=r"artifacts/(?P<path>.+)")
    def artifact(self, request, pk=None, path=""):
        found = artifact_file(self.get_object(), path)
        if found is None:
            raise Http404("No such artifact.")
        return FileResponse(found.open("rb"), as_attachment=True, filename=found.name)


class DatasetViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Upload a text or JSONL corpus (validated) and train on it as 'upload:<id>'."""

    serializer_class = s.DatasetSerializer
    parser_classes = [MultiPartParser, FormParser]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Dataset.objects.none()
        return Dataset.objects.filter(owner=self.request.user)

    def create(self, request):
        upload = request.FILES.get("file")
        if upload is None:
            raise ValidationError({"file": ["Attach a text or JSONL file as 'file'."]})
        try:
            dataset = store_dataset(request.user, upload, name=request.data.get("name") or upload.name)
        except DatasetRejected as error:
            raise ValidationError({"file": [str(error)]}) from None
        return Response(s.DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        if instance.jobs.exists():
            raise ValidationError({"dataset": ["This dataset is used by a job and cannot be deleted."]})
        instance.file.delete(save=False)
        instance.delete()

"""The v1 API's datasets: upload (checked as it streams in), list, get and delete."""

from __future__ import annotations

from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from base.api.docs import FILE_UPLOAD_BODY, READ_ERRORS, WRITE_ERRORS, ErrorSerializer, errors
from base.api.errors import RequestTooLarge
from base.api.parsers import StrictFormParser, StrictMultiPartParser
from fleet.models import Dataset
from workers.api import job_serializers as s
from workers.api.stored_files import StorageDown
from workers.services.datasets import (
    DatasetInUse,
    DatasetRejected,
    DatasetTooLarge,
    DatasetUploadLimit,
    delete_dataset,
    store_dataset,
)
from workers.services.storage import StorageUnavailable


@extend_schema_view(
    list=extend_schema(
        summary="List your datasets", responses={200: s.DatasetSerializer(many=True), **errors(401, 429)}
    ),
    retrieve=extend_schema(summary="Get a dataset", responses={200: s.DatasetSerializer, **errors(*READ_ERRORS)}),
    create=extend_schema(
        summary="Upload a dataset",
        description=(
            "A UTF-8 file of one record per line, as multipart `file`: plain text, or JSON lines all of one kind: "
            '`{"text"}`, chats `{"messages": [{"role", "content"}, ...]}` (system, user and assistant roles; '
            'trained on the assistant turns) or `{"prompt", "completion"}` (trained on the completion). Each '
            "line is checked; 400 names the first bad one; 413 once the body passes the dataset limit "
            "(DATASET_MAX_BYTES), refused while it streams in."
        ),
        request=FILE_UPLOAD_BODY,
        responses={
            201: s.DatasetSerializer,
            413: OpenApiResponse(ErrorSerializer, description="The file is over the dataset limit."),
            **errors(*WRITE_ERRORS),
        },
    ),
    destroy=extend_schema(
        summary="Delete a dataset",
        description="Refused (400, field `dataset`) while a job uses it.",
        responses={204: OpenApiResponse(description="Deleted."), **errors(400, *READ_ERRORS, 403)},
    ),
)
class DatasetViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Upload a text or JSONL corpus (validated) and train on it as 'upload:<id>'."""

    serializer_class = s.DatasetSerializer
    parser_classes = [StrictMultiPartParser, StrictFormParser]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Dataset.objects.none()
        return Dataset.objects.filter(owner=self.request.user)

    def create(self, request):
        # Refuse an upload over DATASET_MAX_BYTES as it streams in, before Django parses the body.
        request.upload_handlers.insert(0, DatasetUploadLimit(request))
        try:
            upload = request.FILES.get("file")
            if upload is None:
                raise ValidationError({"file": [_("Attach a text or JSONL file as 'file'.")]})
            dataset = store_dataset(request.user, upload, name=request.data.get("name") or upload.name)
        except DatasetTooLarge as error:
            raise RequestTooLarge(str(error)) from None
        except DatasetRejected as error:
            raise ValidationError({"file": [str(error)]}) from None
        except StorageUnavailable as error:
            raise StorageDown(str(error)) from None
        return Response(s.DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        try:
            delete_dataset(instance)
        except DatasetInUse as error:
            raise ValidationError({"dataset": [str(error)]}) from None

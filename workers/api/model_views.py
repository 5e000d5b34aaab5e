"""Models in the v1 API: the built-in catalog and your own Hugging Face models (upload, list, get, delete)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, ErrorDetail, ValidationError
from rest_framework.response import Response

from base.api.docs import FILE_UPLOAD_BODY, READ_ERRORS, WRITE_ERRORS, ErrorSerializer, errors
from base.api.errors import RequestTooLarge
from base.api.parsers import StrictFormParser, StrictMultiPartParser
from fleet.models import UploadedModel
from workers.api import model_serializers as s
from workers.api.stored_files import StorageDown
from workers.services.models import (
    MODEL_REFERENCE,
    ModelFileError,
    ModelInUse,
    ModelTooLarge,
    ModelUnavailable,
    ModelUploadLimit,
    delete_model,
    resolve_model_source,
    store_model,
)
from workers.services.storage import StorageUnavailable

UPLOAD_FIELDS, UPLOAD_FILES = {"name"}, {"file"}
NAME_MAX = 120


class ModelConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = gettext_lazy("The model is in use.")
    default_code = "model_in_use"


@extend_schema_view(
    list=extend_schema(
        summary="List models",
        description=(
            "The built-in models (`source` catalog) and your uploads (`source` upload), each with the `reference` "
            "a job's `model` takes. With `?name=`, only that model, after checking the platform can train it: a "
            "catalog name, `model:<id>` of yours, or a Hugging Face Hub id (`org/name`) that the platform's Hugging "
            "Face cache holds (nothing is downloaded from the Hub); otherwise 400 with code `model_unavailable`."
        ),
        parameters=[OpenApiParameter("name", str, description="Check one model: llama-tiny, model:7, org/name.")],
        responses={200: s.ModelEntrySerializer(many=True), **errors(400, 401, 429)},
    ),
    retrieve=extend_schema(
        summary="Get one of your models",
        description="An upload with its config.json and shape (exact parameter count, linear layers).",
        responses={200: s.UploadedModelDetailSerializer, **errors(*READ_ERRORS)},
    ),
    create=extend_schema(
        summary="Upload a model",
        description=(
            "A Hugging Face model folder as a .tar.gz, .tgz, .tar or .zip archive in multipart `file` (a single "
            "top-level folder is fine): config.json of a supported architecture (llama, mistral, qwen2), "
            "safetensors weights (`model.safetensors`, or `model.safetensors.index.json` and its shards) whose "
            "every tensor has the shape the config implies, and a tokenizer (tokenizer.json, or tokenizer.model / "
            "vocab files with tokenizer_config.json). Pickled weights (.bin, .pt, .pth, .pkl, .ckpt) are refused, "
            "never opened. Everything is checked before anything is kept: 400 names the problem in `errors.file` "
            "with a `code` (not_an_archive, unsafe_archive, pickle_weights, missing_config, unsupported_model, "
            "missing_weights, weights_mismatch, missing_tokenizer, invalid_tokenizer, ...); 413 over the size "
            "limit. Train it by its `reference`, `model:<id>`."
        ),
        request=FILE_UPLOAD_BODY,
        responses={
            201: s.UploadedModelSerializer,
            413: OpenApiResponse(ErrorSerializer, description="The archive, or what it unpacks to, is over the limit."),
            **errors(*WRITE_ERRORS),
        },
    ),
    destroy=extend_schema(
        summary="Delete one of your models",
        description="Deletes the model and its files. 409 while a job that hasn't ended trains it (the job is named).",
        responses={
            204: OpenApiResponse(description="Deleted."),
            409: OpenApiResponse(ErrorSerializer, description="A job that hasn't ended trains this model."),
            **errors(*READ_ERRORS, 403),
        },
    ),
)
class ModelViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Your own Hugging Face models, checked at upload, trained as 'model:<id>'; and the built-in ones."""

    parser_classes = [StrictMultiPartParser, StrictFormParser]
    pagination_class = None

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return UploadedModel.objects.none()
        return UploadedModel.objects.filter(owner=self.request.user)

    def get_serializer_class(self):
        return s.UploadedModelDetailSerializer if self.action == "retrieve" else s.UploadedModelSerializer

    def list(self, request):
        name = request.query_params.get("name")
        if name:  # `?name=` is no name, as every empty query parameter (base.api.schema)
            return Response([self.checked_entry(name)])
        uploads = s.UploadedModelSerializer(self.get_queryset(), many=True).data
        return Response([*s.catalog_entries(), *uploads])

    def checked_entry(self, name: str) -> dict:
        try:
            source = resolve_model_source(name, owner=self.request.user)
        except ModelUnavailable as error:
            raise ValidationError({"name": [ErrorDetail(str(error), code="model_unavailable")]}) from None
        if source.source != "upload":
            return s.source_entry(source)
        upload = self.get_queryset().filter(pk=int(MODEL_REFERENCE.match(source.reference)[1])).first()
        return s.UploadedModelSerializer(upload).data if upload else s.source_entry(source)

    def create(self, request):
        # Refuse an upload over the limit as it streams in, before Django parses the body.
        request.upload_handlers.insert(0, ModelUploadLimit(request))
        try:
            upload, name = self.upload_fields(request)
            model = store_model(request.user, upload, name)
        except ModelTooLarge as error:
            raise RequestTooLarge(str(error)) from None
        except ModelFileError as error:
            raise ValidationError({"file": [ErrorDetail(str(error), code=error.code)]}) from None
        except StorageUnavailable as error:
            raise StorageDown(str(error)) from None
        return Response(s.UploadedModelSerializer(model).data, status=status.HTTP_201_CREATED)

    def upload_fields(self, request) -> tuple:
        unknown = sorted((set(request.data) - UPLOAD_FIELDS - UPLOAD_FILES) | (set(request.FILES) - UPLOAD_FILES))
        if unknown:
            raise ValidationError(
                {
                    name: [
                        ErrorDetail(
                            _("Unknown field '%(name)s'. Known fields: file, name.") % {"name": name}, "unknown_field"
                        )
                    ]
                    for name in unknown
                }
            )
        upload = request.FILES.get("file")
        if upload is None:
            attach = _("Attach the model folder as a .tar.gz, .tgz, .tar or .zip archive in 'file'.")
            raise ValidationError({"file": [ErrorDetail(attach, code="required")]})
        name = str(request.data.get("name") or "").strip()
        if len(name) > NAME_MAX:
            raise ValidationError(
                {"name": [ErrorDetail(_("At most %(most)s characters.") % {"most": NAME_MAX}, code="max_length")]}
            )
        return upload, name

    def perform_destroy(self, instance):
        try:
            delete_model(self.request.user, instance)
        except ModelInUse as error:
            raise ModelConflict(str(error)) from None

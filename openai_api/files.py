"""/v1/files: a user's Starverse datasets as OpenAI file objects (purpose `fine-tune` only).

An upload is checked and stored as any dataset upload is (workers.services.datasets.store_dataset): OpenAI's
chat JSONL (`{"messages": [...]}`) is the chat kind, `{"prompt", "completion"}` the completion kind, and a plain
text or `{"text"}` file is taken too. Another user's file is a 404, as one that doesn't exist.
"""

from __future__ import annotations

from django.http import FileResponse
from rest_framework import status
from rest_framework.response import Response

from base.api.parsers import StrictFormParser, StrictMultiPartParser
from fleet.models import Dataset
from kernel.storage import StorageError
from openai_api.errors import SERVER_ERROR, OpenAIError, OpenAIView, invalid, not_found
from openai_api.objects import FILE, cursor_page, object_id, page_params, pk_or_404, unix
from workers.services.datasets import (
    DatasetInUse,
    DatasetRejected,
    DatasetTooLarge,
    DatasetUploadLimit,
    delete_dataset,
    store_dataset,
)
from workers.services.storage import StorageUnavailable, platform_store

PURPOSE = "fine-tune"
MAX_FILES_PAGE = 10_000  # OpenAI's default and largest page of files


def file_object(dataset: Dataset) -> dict:
    return {
        "id": object_id(FILE, dataset.pk),
        "object": "file",
        "bytes": dataset.size_bytes,
        "created_at": unix(dataset.created_at),
        "filename": dataset.name,
        "purpose": PURPOSE,
        "status": "processed",  # checked in full before it was stored
        "status_details": None,
        "expires_at": None,
    }


def storage_down() -> OpenAIError:
    return OpenAIError(
        "Object storage is unavailable right now; try again shortly.",
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        kind=SERVER_ERROR,
    )


def own_file(request, file_id: str, param: str = "id") -> Dataset:
    dataset = Dataset.objects.filter(pk=pk_or_404(FILE, file_id, param), owner=request.user).first()
    if dataset is None:
        raise not_found(f"No such File object: {file_id}", param=param)
    return dataset


class FilesView(OpenAIView):
    parser_classes = [StrictMultiPartParser, StrictFormParser]

    def get(self, request):
        after, limit = page_params(request, FILE, default=MAX_FILES_PAGE, most=MAX_FILES_PAGE)
        order = request.query_params.get("order") or "desc"
        if order not in ("asc", "desc"):
            raise invalid("order", f"order must be 'asc' or 'desc', not {order!r}.")
        files = Dataset.objects.filter(owner=request.user)
        purpose = request.query_params.get("purpose") or PURPOSE
        if purpose != PURPOSE:
            files = files.none()
        return Response(cursor_page(files, after, limit, file_object, newest_first=order == "desc"))

    def post(self, request):
        request.upload_handlers.insert(0, DatasetUploadLimit(request))  # refused while it streams in
        try:
            upload = request.FILES.get("file")
            purpose = request.data.get("purpose")
        except DatasetTooLarge as error:
            raise OpenAIError(str(error), param="file", status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE) from None
        if purpose != PURPOSE:
            raise invalid("purpose", f"Only purpose '{PURPOSE}' is supported here, not {purpose!r}.")
        if upload is None:
            raise invalid("file", "Attach the JSONL file as the multipart field 'file'.")
        try:
            dataset = store_dataset(request.user, upload, name=upload.name or "upload.jsonl")
        except DatasetTooLarge as error:
            raise OpenAIError(str(error), param="file", status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE) from None
        except DatasetRejected as error:
            raise invalid("file", str(error), code="invalid_file") from None
        except StorageUnavailable:
            raise storage_down() from None
        return Response(file_object(dataset))


class FileView(OpenAIView):
    def get(self, request, file_id: str):
        return Response(file_object(own_file(request, file_id)))

    def delete(self, request, file_id: str):
        dataset = own_file(request, file_id)
        try:
            delete_dataset(dataset)
        except DatasetInUse as error:
            raise OpenAIError(
                str(error), param="id", code="file_in_use", status_code=status.HTTP_409_CONFLICT
            ) from None
        return Response({"id": file_id, "object": "file", "deleted": True})


class FileContentView(OpenAIView):
    def get(self, request, file_id: str):
        dataset = own_file(request, file_id)
        try:
            stream = platform_store().open(dataset.key)
        except StorageError:
            raise storage_down() from None
        return FileResponse(stream, content_type="application/octet-stream", filename=dataset.name)

"""Sending one stored file to its owner (checked before this is called): a redirect to a short-lived
presigned URL where the store has them (S3: the bytes never pass through the web server), else the file
streamed from the store."""

from __future__ import annotations

from django.http import FileResponse, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.utils.translation import gettext_lazy
from rest_framework import status
from rest_framework.exceptions import APIException

from workers.services.storage import platform_store

PRESIGNED_URL_SECONDS = 300


class StorageDown(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = gettext_lazy("Object storage is unavailable right now; try again shortly.")
    default_code = "storage_unavailable"


def stored_file_response(key: str, filename: str) -> HttpResponse:
    """302 to a presigned URL, or the file as an attachment; raises StorageError when storage fails."""
    store = platform_store()
    url = store.presigned_url(key, filename, expires_s=PRESIGNED_URL_SECONDS)
    if url is not None:
        response = HttpResponseRedirect(url)
        response["Cache-Control"] = "private, no-store"  # the URL is a credential while it lasts
        return response
    return FileResponse(store.open(key), as_attachment=True, filename=filename)


def tar_response(download) -> StreamingHttpResponse:
    """A model download (workers.services.model_download.ModelDownload) streamed as an attached tar."""
    response = StreamingHttpResponse(download.stream(), content_type="application/x-tar")
    response["Content-Disposition"] = f'attachment; filename="{download.filename}"'
    return response

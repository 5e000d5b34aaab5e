"""A limit on uploaded files enforced while the request body streams in, before Django keeps any of it.

Django streams a multipart file to memory or a temporary file whatever its size, and a view sees it only
once the whole body is in: a 240 MiB dataset was read to the end before being refused. An `UploadLimit`
put first among a request's upload handlers (`request.upload_handlers.insert(0, ...)`, before the body
is read) refuses a declared length over the limit before a byte is read, and otherwise stops at the
chunk that passes it, counting every file of the request together.
"""

from __future__ import annotations

from django.core.files.uploadhandler import FileUploadHandler
from django.utils.translation import gettext as _

# What a multipart body carries beside its files: boundaries, part headers, small form fields.
MULTIPART_ALLOWANCE = 1024 * 1024


def upload_size(size: int | None) -> str:
    """How large an upload is, for its refusal, in the request's language: its size in bytes, or (None) that its
    bytes passed the limit as they streamed in."""
    if size is None:
        return _("The upload is over the limit")
    return _("The upload is %(size)s bytes") % {"size": f"{size:,}"}


class UploadLimit(FileUploadHandler):
    """Raises `refuse(...)` out of the request's parsing once its files pass `limit()` bytes."""

    def __init__(self, request=None) -> None:
        super().__init__(request)
        self.received = 0

    def limit(self) -> int:
        raise NotImplementedError

    def refuse(self, what: str, limit: int) -> Exception:
        """The exception to raise: `what` says how large the upload is (`upload_size`), `limit` is the limit in
        bytes."""
        raise NotImplementedError

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):  # noqa: N803 - Django's
        limit = self.limit()
        if content_length and content_length > limit + MULTIPART_ALLOWANCE:
            raise self.refuse(upload_size(content_length), limit)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        limit = self.limit()
        if self.received > limit:
            raise self.refuse(upload_size(None), limit)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler keeps the file


def refused_while_streaming(request, limit: UploadLimit, too_large: type[Exception], form_class):
    """Parse a page's POSTed files now, `limit` first among the handlers; once they pass it, a form of
    `form_class` carrying the refusal under its `file` field (the page answers it with a 413), else None."""
    request.upload_handlers.insert(0, limit)
    try:
        request.FILES  # noqa: B018 - parse the body now, under the limit
    except too_large as error:
        refused = form_class(data={}, files={})
        refused.errors["file"] = refused.error_class([str(error)])
        return refused
    return None

"""Errors in OpenAI's shape on every /v1/ route: {"error": {"message", "type", "param", "code"}}.

The views raise `OpenAIError` for what they refuse; everything DRF raises before or around them (a missing or
bad token, a read-only token, the rate limit, a body that doesn't parse) is translated by `exception_handler`,
so a client never meets the site's own error format here.
"""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from base.api.errors import api_exception

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


class OpenAIError(Exception):
    """A refusal answered as OpenAI's error object with `status_code`."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status_code: int = status.HTTP_400_BAD_REQUEST,
        kind: str = INVALID_REQUEST,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message, self.param, self.code, self.status_code, self.kind = message, param, code, status_code, kind
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def invalid(param: str | None, message: str, code: str | None = None) -> OpenAIError:
    """A 400 naming the parameter at fault."""
    return OpenAIError(message, param=param, code=code)


def not_found(message: str, param: str | None = "id") -> OpenAIError:
    return OpenAIError(message, param=param, status_code=status.HTTP_404_NOT_FOUND)


# DRF's refusals by class: (OpenAI's type, code). Anything else keeps its status as an invalid request.
TRANSLATED = (
    (exceptions.NotAuthenticated, INVALID_REQUEST, "missing_api_key"),
    (exceptions.AuthenticationFailed, INVALID_REQUEST, "invalid_api_key"),
    (exceptions.PermissionDenied, INVALID_REQUEST, "insufficient_permissions"),
    (exceptions.Throttled, "requests", "rate_limit_exceeded"),
    (exceptions.NotFound, INVALID_REQUEST, None),
    (exceptions.MethodNotAllowed, INVALID_REQUEST, "method_not_allowed"),
    (exceptions.UnsupportedMediaType, INVALID_REQUEST, "unsupported_media_type"),
    (exceptions.ParseError, INVALID_REQUEST, "invalid_json"),
)


def translated(exc: exceptions.APIException) -> OpenAIError:
    kind, code = next(((kind, code) for cls, kind, code in TRANSLATED if isinstance(exc, cls)), (INVALID_REQUEST, None))
    if exc.status_code >= 500:
        kind = SERVER_ERROR
    detail = exc.detail
    if isinstance(detail, dict):  # a validation error: its first field and message
        param, messages = next(iter(detail.items()), (None, ["Invalid request."]))
        message = str(messages[0] if isinstance(messages, list) and messages else messages)
        return OpenAIError(message, param=None if param == "non_field_errors" else param, status_code=exc.status_code)
    message = str(detail[0] if isinstance(detail, list) and detail else detail)
    code = code or (getattr(detail, "code", None) if getattr(exc, "answer_with_code", False) else None)
    return OpenAIError(message, code=code, status_code=exc.status_code, kind=kind)


def exception_handler(exc, context):
    """DRF's handler for the /v1/ views: OpenAI's error object, DRF's headers (WWW-Authenticate, Retry-After)."""
    if isinstance(exc, OpenAIError):
        return Response(exc.body(), status=exc.status_code, headers=exc.headers)
    exc = api_exception(exc)  # Django's refusals of a malformed or too large body
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    response.data = translated(exc).body() if isinstance(exc, exceptions.APIException) else response.data
    return response


class JSONWhateverAccepted(DefaultContentNegotiation):
    """OpenAI answers JSON (or a file's bytes) whatever Accept says: its client asks for application/binary."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


@extend_schema(exclude=True)  # OpenAI publishes these routes' schema; docs/FINE_TUNING.md says what is kept of it
class OpenAIView(APIView):
    """A /v1/ view: the site's token authentication, scopes and rate limits, with errors in OpenAI's shape."""

    content_negotiation_class = JSONWhateverAccepted

    def get_exception_handler(self):
        return exception_handler


@csrf_exempt  # it changes nothing
def unknown_route(request, *args, **kwargs):
    """Any other path under /v1/: OpenAI's 404 for an invalid URL."""
    error = not_found(f"Invalid URL ({request.method} {request.path})", param=None)
    return JsonResponse(error.body(), status=error.status_code)

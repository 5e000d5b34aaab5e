"""One error format for the whole API: {"detail": ..., "errors": {field: [messages]}, "code": ...}.

Bad input (400) carries `errors` by field and a machine-readable `code` (e.g. `insufficient_credit`,
`budget_too_low`, `no_capacity`, `model_does_not_fit`, `unknown_field`, else `invalid`/`required`)
that the SDK maps to a typed exception. Other errors are `{"detail": ...}`, told apart by status, except
the refusals a client acts on (an exception with `answer_with_code`, e.g. a 401 `two_factor_required`).
"""

from __future__ import annotations

import re

from django.apps import apps
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status
from rest_framework.exceptions import APIException, ErrorDetail, NotFound, ParseError, ValidationError
from rest_framework.views import exception_handler as drf_exception_handler


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = gettext_lazy("The request body is too large.")
    default_code = "request_too_large"


NOT_FOUND_QUERY = re.compile(r"No (\w+) matches the given query\.")
NOT_FOUND_ENGLISH = "No %(name)s matches the given query."


def api_exception(exc: Exception) -> Exception:
    """Django's refusals of a malformed body (too big, too many fields), as API errors instead of an HTML 400;
    get_object_or_404's English "No Job matches the given query." in the request's language."""
    if isinstance(exc, Http404) and (named := NOT_FOUND_QUERY.fullmatch(str(exc))):
        template = _("No %(name)s matches the given query.")
        if template != NOT_FOUND_ENGLISH:  # in English, Django's own words as they were
            return NotFound(template % {"name": verbose_name_of(named[1])})
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return RequestTooLarge(
            _("The request body is too large: this API takes at most %(limit)s bytes of fields.")
            % {"limit": f"{limit:,}"}
        )
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return ValidationError({"non_field_errors": [ErrorDetail(f"{exc}", "too_many_fields")]})
    if isinstance(exc, SuspiciousOperation):
        return ValidationError({"non_field_errors": [ErrorDetail(_("The request is malformed."), "malformed")]})
    return exc


def verbose_name_of(object_name: str) -> str:
    """A model's name for people, from its class name ("Job": "job", in the request's language)."""
    model = next((model for model in apps.get_models() if model._meta.object_name == object_name), None)
    return str(model._meta.verbose_name) if model is not None else object_name


def exception_handler(exc, context):
    exc = api_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ValidationError):
        errors = response.data if isinstance(response.data, dict) else {"non_field_errors": response.data}
        fields = ", ".join(errors)
        response.data = {
            "detail": _("Invalid input: %(fields)s.") % {"fields": fields},
            "code": validation_code(exc),
            "errors": errors,
        }
    elif isinstance(exc, ParseError):
        detail = str(exc.detail)
        response.data = {"detail": detail, "code": "parse_error", "errors": {"non_field_errors": [detail]}}
    elif getattr(exc, "answer_with_code", False):  # a refusal a client acts on by its code
        response.data = {"detail": str(exc.detail), "code": exc.detail.code}
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"])}
    return response


def validation_code(exc: ValidationError) -> str:
    """The most telling code of a validation error: the first one more specific than `invalid`."""
    codes = list(flatten(exc.get_codes()))
    return next((code for code in codes if code != "invalid"), "invalid")


def flatten(codes):
    if isinstance(codes, dict):
        for value in codes.values():
            yield from flatten(value)
    elif isinstance(codes, list):
        for value in codes:
            yield from flatten(value)
    else:
        yield str(codes)


def page_not_found(request, exception):
    """Django's 404 (handler404): JSON in the API's format under /api/, the site's page elsewhere.

    The API's last route answers any other /api/v1/ path, but not one whose path holds a newline (%0A),
    which no route's `.` matches: without this that got the HTML page (#28, found by schemathesis).
    """
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": _("No API endpoint at %(path)s; see /api/v1/docs/.") % {"path": repr(request.path)}}, status=404
        )
    return defaults.page_not_found(request, exception)


@csrf_exempt  # it changes nothing; Django's CSRF page would answer HTML
def unknown_endpoint(request, *args, **kwargs):
    """A path under /api/v1/ that names no endpoint: a JSON 404 (GETs missing their slash are redirected)."""
    if request.method in ("GET", "HEAD") and not request.path.endswith("/"):
        try:
            if resolve(request.path + "/").func is not unknown_endpoint:
                return HttpResponsePermanentRedirect(
                    request.get_full_path().replace(request.path, request.path + "/", 1)
                )
        except Resolver404:
            pass
    return JsonResponse(
        {"detail": _("No API endpoint at %(path)s; see /api/v1/docs/.") % {"path": request.path}}, status=404
    )

"""Request checks that every page and endpoint needs before any view runs."""

from __future__ import annotations

from collections.abc import Callable

from csp.middleware import CSPMiddleware
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.translation import gettext as _

NUL = "\x00"
NUL_CODE = "null_characters_not_allowed"
API_PREFIX = "/api/"


def nul_parameter(request: HttpRequest) -> str | None:
    """The first place of the URL holding a NUL character ("path" or a query parameter's name), or None."""
    if NUL in request.path:
        return "path"
    for name, values in request.GET.lists():
        if NUL in name or any(NUL in value for value in values):
            return name.replace(NUL, "\\u0000")
    return None


def refusal(request: HttpRequest, parameter: str) -> HttpResponse:
    """A 400 naming the parameter: the API's JSON error format under /api/, plain text elsewhere.

    In the request's language (this middleware runs after LocaleMiddleware); the code stays English."""
    message = _("Null characters (U+0000) are not allowed in %(parameter)s.") % {"parameter": repr(parameter)}
    if request.path.startswith(API_PREFIX):
        detail = _("Invalid input: %(fields)s.") % {"fields": parameter}
        body = {"detail": detail, "code": NUL_CODE, "errors": {parameter: [message]}}
        return JsonResponse(body, status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


class RefuseNulCharacters:
    """A NUL in the path or the query string is a 400 here, not a 500 where PostgreSQL refuses it later.

    PostgreSQL stores no NUL in text, and file paths can't hold one, so no view could use it anyway.
    Bodies are checked by the API's parsers (base.api.parsers) and by Django's form fields.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        parameter = nul_parameter(request)
        if parameter is not None:
            return refusal(request, parameter)
        return self.get_response(request)


class ContentSecurityPolicy(CSPMiddleware):
    """django-csp's middleware, not run for JSON responses: a policy says what a page may load, and a JSON
    body loads nothing. django-csp builds the policy for every response before looking at exemptions,
    which cost an API request about 5% of its CPU; pages (the browsable API included) keep their header."""

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        return super().process_response(request, response)

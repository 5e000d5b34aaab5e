"""One error format for the whole API: {"detail": ..., "errors": {field: [messages]}, "code": ...}.

Bad input (400) carries `errors` by field and a machine-readable `code` (e.g. `insufficient_credit`,
`budget_too_low`, `no_capacity`, `model_does_not_fit`, `unknown_field`, else `invalid`/`required`)
that the SDK maps to a typed exception. Other errors are `{"detail": ...}`, told apart by status.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ValidationError):
        errors = response.data if isinstance(response.data, dict) else {"non_field_errors": response.data}
        fields = ", ".join(errors)
        response.data = {"detail": f"Invalid input: {fields}.", "code": validation_code(exc), "errors": errors}
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

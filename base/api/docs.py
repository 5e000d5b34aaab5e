"""Shared pieces of the OpenAPI description: the error format and the common error answers."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema_field
from rest_framework import serializers


@extend_schema_field({"$ref": "#/components/schemas/FieldErrors"})  # defined in base.api.schema
class FieldErrorsField(serializers.DictField):
    """{field: [messages]}; a field made of fields (an object such as `lora`, a map such as `chip_counts`)
    holds such a map of its own instead of a list (#28: the schema said a list, schemathesis found a map)."""


class ErrorSerializer(serializers.Serializer):
    """Every error of the API: a sentence, and for bad input the messages per field."""

    detail = serializers.CharField(help_text="What went wrong, in one sentence.")
    errors = FieldErrorsField(
        required=False,
        help_text="Bad input only: {field name: [messages]}. Header problems use the header's name.",
    )
    code = serializers.CharField(
        required=False,
        help_text="Bad input only: insufficient_credit, budget_too_low, no_capacity, model_does_not_fit, "
        "unknown_field, required, invalid, ...",
    )


ERROR_DESCRIPTIONS = {
    400: "Bad input; `errors` names each field and what is wrong with it.",
    401: "No, an invalid, a revoked or an expired API token.",
    403: "The token may not do this (a read-only token on a write).",
    404: "No such object among yours.",
    409: "A request with the same Idempotency-Key is still being processed; retry shortly.",
    422: "This Idempotency-Key was already used for a different request.",
    429: "Too many requests; wait the seconds in the Retry-After header.",
    502: "The payment service is unavailable; retry in a minute.",
    503: "The service this needs is not configured on this platform.",
}

VALIDATION_EXAMPLE = OpenApiExample(
    "Bad input",
    value={
        "detail": "Invalid input: max_budget.",
        "code": "invalid",
        "errors": {"max_budget": ["A valid number is required."]},
    },
    response_only=True,
    status_codes=["400"],
)


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """The error answers an operation can give, for `extend_schema(responses={..., **errors(400, 404)})`."""
    return {code: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code]) for code in codes}


# What every endpoint that needs a user's token can answer.
AUTH_ERRORS = (401, 429)
READ_ERRORS = (*AUTH_ERRORS, 404)
WRITE_ERRORS = (400, *AUTH_ERRORS, 403)
IDEMPOTENT_WRITE_ERRORS = (*WRITE_ERRORS, 409, 422)


# A multipart upload's body: the file and an optional name (the dataset and model uploads).
FILE_UPLOAD_BODY = {
    "multipart/form-data": {
        "type": "object",
        "properties": {"file": {"type": "string", "format": "binary"}, "name": {"type": "string"}},
        "required": ["file"],
    }
}

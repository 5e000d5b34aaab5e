"""Input checks shared by the API's write endpoints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.utils.translation import gettext as _
from rest_framework.exceptions import ErrorDetail, ValidationError
from rest_framework.serializers import Serializer


def refuse_unknown_fields(serializer: Serializer, *, read_only: Iterable[str] = ()) -> None:
    """Refuse a misspelt field ("max_budjet") by name instead of silently ignoring it.

    Fields of the answer (`read_only`: id, status, owner...) are ignored rather than refused, so a
    client may send back an object it got; they are never written (docs/RELIABILITY.md #20).
    """
    data = serializer.initial_data
    if not isinstance(data, Mapping):
        raise ValidationError({"non_field_errors": [_("Send a JSON object.")]})
    known = {name for name, field in serializer.fields.items() if not field.read_only}
    unknown = sorted(set(data) - known - set(read_only))
    if unknown:
        allowed = ", ".join(sorted(known))
        raise ValidationError(
            {
                name: [
                    ErrorDetail(
                        _("Unknown field '%(name)s'. Known fields: %(allowed)s.") % {"name": name, "allowed": allowed},
                        "unknown_field",
                    )
                ]
                for name in unknown
            }
        )

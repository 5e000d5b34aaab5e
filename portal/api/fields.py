"""Money in the API is a decimal string in currency units ("10.00")."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.money import format_amount


@extend_schema_field({"type": "string", "format": "decimal", "example": "10.00", "nullable": True})
class MoneyField(serializers.Field):
    def __init__(self, **kwargs):
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, micros: int | None) -> str | None:
        return None if micros is None else format_amount(micros)


__all__ = ["MoneyField", "OpenApiTypes"]

"""Money in the API is a decimal string in currency units ("10.00")."""

from __future__ import annotations

from decimal import Decimal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from kernel.money import format_amount


@extend_schema_field({"type": "string", "format": "decimal", "example": "10.00", "nullable": True})
class MoneyField(serializers.Field):
    def __init__(self, **kwargs):
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, micros: int | None) -> str | None:
        return None if micros is None else format_amount(micros)


class MoneyInputField(serializers.DecimalField):
    """Money sent in: a decimal in currency units, at most 6 decimals (micro-units), between the bounds.

    `max_digits` follows from `max_value`, so the documented maximum itself is accepted (a hand-set
    max_digits of 12 refused 1000000.000000, which has 13).
    """

    DECIMALS = 6

    def __init__(self, *, max_value: Decimal, min_value: Decimal = Decimal("0.000001"), **kwargs):
        whole_digits = len(str(int(max_value)))
        super().__init__(
            max_digits=whole_digits + self.DECIMALS,
            decimal_places=self.DECIMALS,
            min_value=min_value,
            max_value=max_value,
            **kwargs,
        )


__all__ = ["MoneyField", "MoneyInputField", "OpenApiTypes"]

"""Money is integer micro-units of the platform currency. These are the only conversions."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

MICROS_PER_UNIT = 1_000_000


class InvalidAmount(ValueError):
    """An amount that is not a finite decimal number with at most six decimal places."""


def to_micros(amount: Decimal | str | int) -> int:
    """Parse a currency amount ("10", "10.5", Decimal("0.000001")) into exact micro-units."""
    try:
        value = Decimal(str(amount).strip())
    except (InvalidOperation, ValueError):
        raise InvalidAmount(f"'{amount}' is not a number.") from None
    if not value.is_finite():
        raise InvalidAmount(f"'{amount}' is not a finite number.")
    micros = value * MICROS_PER_UNIT
    if micros != micros.to_integral_value():
        raise InvalidAmount(f"'{amount}' has more than six decimal places.")
    return int(micros)


def round_micros(value: Decimal) -> int:
    """The one rounding rule for computed money (half up, to a whole micro-unit)."""
    return int(value.to_integral_value(rounding=ROUND_HALF_UP))


def to_decimal(micros: int) -> Decimal:
    return Decimal(micros) / MICROS_PER_UNIT


def format_amount(micros: int) -> str:
    """ "10.00", "0.000333", "-1.50": at least two decimals, more only when they carry value."""
    text = f"{to_decimal(micros):.6f}".rstrip("0")
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"

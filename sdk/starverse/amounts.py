"""Amounts for people: to the cent, rounded half up, with thousands separators ("1,234.57").

A real but tiny amount reads "<0.01", never "0.00", which would say it was free. Scripts read the API's exact
decimals (`--json`, the SDK's dicts); only what is printed for people is rounded.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

CENT = Decimal("0.01")


def cents(value: object) -> str:
    """ "1,234.57" from "1234.567891"; "<0.01" from "0.004999"; "-" for none; other text as it is."""
    if value is None or value == "":
        return "-"
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if not amount.is_finite():
        return str(value)
    rounded = amount.quantize(CENT, rounding=ROUND_HALF_UP)
    if amount and not rounded:
        return "-<0.01" if amount < 0 else "<0.01"
    return f"{rounded:,}"

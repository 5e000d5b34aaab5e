"""Money in templates: `{% load money %}`, then

- `{{ micros|money }}` for balances, costs, charges and refunds: cents, the exact amount on hover,
  `<span class="money" title="¥9.880288">¥9.88</span>` (a dash for none);
- `{{ micros|signed_money }}` the same with the sign first ("+¥10.00", "−¥9.88"), for ledger columns;
- `{{ micros|price }}` for prices per chip-hour, every significant decimal ("¥0.000333"): rounding a
  price to cents would misstate what a chip-hour costs.

The admin and views that build cells in Python call `money_html` and `signed_money_html` directly.
"""

from __future__ import annotations

from decimal import Decimal

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from kernel.money import MINUS, NO_AMOUNT, format_money, format_money_signed, format_price, format_signed

register = template.Library()


def exact(micros: int) -> str:
    """Every micro-unit, with a leading minus when negative ("¥9.880288", "−¥1.50"): the hover text."""
    return f"{MINUS}{format_price(-micros)}" if micros < 0 else format_price(micros)


def whole_micros(value) -> int | None:
    """The value as whole micro-units: an int, or a whole Decimal (what a database SUM can return); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return None


def money_html(micros: int | None) -> SafeString | str:
    """ "¥9.88" with "¥9.880288" on hover; a dash for none (or a value the template could not look up)."""
    micros = whole_micros(micros)
    if micros is None:
        return NO_AMOUNT
    return format_html('<span class="money" title="{}">{}</span>', exact(micros), format_money(micros))


def signed_money_html(micros: int | None) -> SafeString | str:
    """ "−¥9.88" with "−¥9.880288" on hover, "+¥10.00" with "+¥10.00"; a dash for none."""
    micros = whole_micros(micros)
    if micros is None:
        return NO_AMOUNT
    return format_html('<span class="money" title="{}">{}</span>', format_signed(micros), format_money_signed(micros))


@register.filter
def money(micros: int | None) -> SafeString | str:
    return money_html(micros)


@register.filter
def signed_money(micros: int | None) -> SafeString | str:
    return signed_money_html(micros)


@register.filter
def price(micros: int | None) -> str:
    """ "¥1.20", "¥0.000333" from micro-units; a dash for none (or for a value the template couldn't look up)."""
    return format_price(micros if isinstance(micros, int) else None)

"""Money in templates: `{% load money %}`, then `{{ micros|price }}` shows "¥1.20" (a dash for none)."""

from __future__ import annotations

from django import template

from base.money import format_price

register = template.Library()


@register.filter
def price(micros: int | None) -> str:
    """ "¥1.20" from micro-units; a dash for none (or for a value the template couldn't look up)."""
    return format_price(micros if isinstance(micros, int) else None)

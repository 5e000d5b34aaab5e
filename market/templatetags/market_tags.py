"""Template helpers for the spot pages: prices in micro-units shown in the currency, a job's cost so far."""

from __future__ import annotations

from django import template
from django.db.models import Sum

from portal.views.pages import format_price

register = template.Library()


@register.filter
def price(micros: int | None) -> str:
    """ "¥1.20" from micro-units; a dash for none (or for a value the template couldn't look up)."""
    return format_price(micros if isinstance(micros, int) else None)


@register.simple_tag
def job_cost(job) -> str:
    """What the job has been charged so far (all its allocations, every epoch)."""
    return format_price(job.allocations.aggregate(total=Sum("charged_total"))["total"] or 0)


@register.filter
def seconds(value: float | None) -> str:
    """ "12.3 s", "4 min 5 s"; a dash for none."""
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"

"""Template helpers for the job and spot pages: a job's cost so far, durations. Prices: `{% load money %}`."""

from __future__ import annotations

from django import template
from django.db.models import Sum

from base.money import format_price

register = template.Library()


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

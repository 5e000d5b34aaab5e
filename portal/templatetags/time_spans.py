"""Spans of time within a day, for people: `{% load time_spans %}`, then

- `{{ start|hours_until:end }}`: "2026-03-10 18:00–19:00 UTC+8" ("2026年3月10日 18:00–19:00 UTC+8");
- `{{ start|time_until:end }}`: "18:00:05–18:00:10 UTC+8".

Both ends in the person's own zone, its offset once at the end (base.formatting.format_when); each end is
a `<time>` element holding its UTC instant.
"""

from __future__ import annotations

from django import template
from django.utils import timezone
from django.utils.html import format_html

from base.formatting import format_when, zone_label

register = template.Library()


def _span(start, end, start_part: str, end_part: str):
    if start is None or end is None:
        return format_when(start or end)
    return format_html(
        "{}–{} {}",
        format_when(start, start_part, zone=False),
        format_when(end, end_part, zone=False),
        zone_label(timezone.localtime(end)),
    )


@register.filter
def hours_until(start, end):
    return _span(start, end, "DATETIME_FORMAT", "H:i")


@register.filter
def time_until(start, end):
    return _span(start, end, "TIME_FORMAT", "TIME_FORMAT")

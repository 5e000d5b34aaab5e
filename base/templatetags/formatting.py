"""Values for people in templates, other than money: `{% load formatting %}`, then

- `{{ seconds|duration }}`: "7.2 s", "1 min 40 s", "3 h 12 min", a dash for none (`base.formatting`);
- `{{ count|rate }}`: "812", "45.6k", "1.23M", a dash for none;
- `{{ moment|when }}`, `{{ moment|when_date }}`, `{{ moment|when_time }}`: a time in the person's own zone
  and language, with its offset ("2026年12月7日 14:05 UTC+8"), as a `<time>` element (`base.formatting`).
"""

from __future__ import annotations

from django import template

from base.formatting import format_duration, format_rate, format_when

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    return format_duration(seconds)


@register.filter
def rate(value: float | None) -> str:
    return format_rate(value)


@register.filter
def when(moment):
    return format_when(moment, "DATETIME_FORMAT")


@register.filter
def when_date(moment):
    return format_when(moment, "DATE_FORMAT")


@register.filter
def when_time(moment):
    return format_when(moment, "TIME_FORMAT")

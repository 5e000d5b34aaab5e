"""Values for people in templates, other than money: `{% load formatting %}`, then

- `{{ seconds|duration }}`: "7.2 s", "1 min 40 s", "3 h 12 min", a dash for none (`base.formatting`);
- `{{ count|rate }}`: "812", "45.6k", "1.23M", a dash for none.
"""

from __future__ import annotations

from django import template

from base.formatting import format_duration, format_rate

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    return format_duration(seconds)


@register.filter
def rate(value: float | None) -> str:
    return format_rate(value)

"""Every time in the operator console carries its zone (docs/I18N.md).

Django's admin shows a datetime as the local time alone ("2026年12月7日 14:05"), in its changelists' default
columns, read-only fields and inlines, and asks for one in two inputs with no zone. The console runs in
the operator's zone (Asia/Shanghai unless they chose another), so each shown time gets its offset
("2026年12月7日 14:05 UTC+8", base.formatting.format_when), and each datetime input says which zone it is
read in. Django has no setting for either: `install()` (BaseConfig.ready) wraps the admin's one display
function for the two admin modules that call it, and sets the widget of DateTimeFields on every
registered ModelAdmin.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.contrib.admin import helpers, widgets
from django.contrib.admin.templatetags import admin_list
from django.contrib.admin.utils import display_for_field
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext

from base.formatting import format_when, zone_label


def zoned_display_for_field(value, field, empty_value_display, *args, **kwargs):
    """Django's display_for_field, with a datetime's zone (times the admin reads from the database are aware)."""
    if isinstance(field, models.DateTimeField) and isinstance(value, datetime) and timezone.is_aware(value):
        return format_when(value)
    return display_for_field(value, field, empty_value_display, *args, **kwargs)


class ZonedSplitDateTime(widgets.AdminSplitDateTime):
    """The admin's date and time inputs, the time's label naming the zone it is read in."""

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        now = timezone.localtime()
        context["time_label"] = gettext("Time (%(zone)s, %(offset)s):") % {
            "zone": timezone.get_current_timezone_name(),
            "offset": zone_label(now),
        }
        return context


def install(site: admin.AdminSite = admin.site) -> None:
    helpers.display_for_field = zoned_display_for_field
    admin_list.display_for_field = zoned_display_for_field
    for model_admin in site._registry.values():
        model_admin.formfield_overrides.setdefault(models.DateTimeField, {})["widget"] = ZonedSplitDateTime

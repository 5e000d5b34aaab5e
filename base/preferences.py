"""A person's language and time zone: what every page they see is written and timed in."""

from __future__ import annotations

import zoneinfo
from functools import cache

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _


@cache
def time_zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def validate_time_zone(name: str) -> None:
    if name not in time_zone_names():
        raise ValidationError(
            _("“%(name)s” is not a time zone (try Asia/Shanghai or Europe/Berlin)."), params={"name": name}
        )


class Preferences(models.Model):
    """Set on the account page. No language means the header's switch, then the browser's Accept-Language."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preferences")
    language = models.CharField(_("language"), max_length=16, choices=settings.LANGUAGES, blank=True)
    time_zone = models.CharField(
        _("time zone"), max_length=64, default=settings.DISPLAY_TIME_ZONE, validators=[validate_time_zone]
    )

    class Meta:
        verbose_name = _("preferences")
        verbose_name_plural = _("preferences")

    def __str__(self) -> str:
        return f"{self.user}: {self.language or 'browser'}, {self.time_zone}"

"""The language and time zone of each request (docs/I18N.md).

Django's LocaleMiddleware picks the language from the header switch's cookie, then Accept-Language;
`UserLocaleMiddleware`, after authentication, puts a signed-in person's saved language first and
activates their time zone (Asia/Shanghai unless they chose another). The API answers in UTC whoever asks:
its requests get UTC as their zone (DRF writes datetimes in the current zone), and a token's owner's
language is applied by the token's authentication (portal.api.authentication), which runs after this.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone, translation
from django.views.i18n import set_language

from base.models import Preferences
from base.outage import DATABASE_UNAVAILABLE


def preferences_of(user) -> Preferences | None:
    """The signed-in person's saved choices; None when signed out, never saved, or the database is away.

    During a database outage the request goes on in the default language and zone, so that the view's
    own query meets the outage and answers the 503 (portal.outage), not this middleware a 500.
    """
    try:
        if not user.is_authenticated:  # reading the lazy user reads the session and the user: the database
            return None
        return user.preferences
    except Preferences.DoesNotExist:
        return None
    except DATABASE_UNAVAILABLE:
        return None


# Machine-readable answers: the REST API and the OpenAI-compatible gateway.
API_PATHS = ("/api/", "/v1/")
GATEWAY_PATH = "/v1/"


class UserLocaleMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(GATEWAY_PATH):
            # OpenAI's clients read the gateway's errors in OpenAI's own (English) wording, whoever asks; no
            # preferences to read on this hot path.
            translation.activate("en")
            request.LANGUAGE_CODE = "en"
            return self.in_zone(request, "UTC")
        preferences = preferences_of(getattr(request, "user", _Anonymous))
        if preferences is not None and preferences.language:
            translation.activate(preferences.language)
            request.LANGUAGE_CODE = translation.get_language()
        if request.path.startswith(API_PATHS):
            return self.in_zone(request, "UTC")  # ISO 8601 in UTC (Z), whatever zone the person reads pages in
        return self.in_zone(request, preferences.time_zone if preferences is not None else settings.DISPLAY_TIME_ZONE)

    def in_zone(self, request: HttpRequest, zone: str) -> HttpResponse:
        try:
            timezone.activate(zoneinfo.ZoneInfo(zone))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            timezone.activate(zoneinfo.ZoneInfo(settings.DISPLAY_TIME_ZONE))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


class _Anonymous:
    is_authenticated = False


def switch_language(request: HttpRequest) -> HttpResponse:
    """Django's `set_language` (cookie, redirect back); a signed-in person keeps the choice on their account."""
    response = set_language(request)
    language = request.POST.get("language", "")
    chosen = language in dict(settings.LANGUAGES) and translation.check_for_language(language)
    if request.method == "POST" and request.user.is_authenticated and chosen:
        Preferences.objects.update_or_create(user=request.user, defaults={"language": language})
    return response

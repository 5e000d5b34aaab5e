"""The account's preferences page: the language and time zone every page is written and timed in (#33).

No language means "follow the browser": the header's switch (a cookie), then Accept-Language. The time zone
is any IANA name (`portal.models.preferences.validate_time_zone` refuses the rest, by name, on the field).
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from base.models import Preferences
from base.preferences import time_zone_names

# Offered first in the time zone's suggestions: where most of our customers read their pages.
COMMON_ZONES = (
    "Asia/Shanghai",
    "Asia/Hong_Kong",
    "Asia/Taipei",
    "Asia/Singapore",
    "Asia/Tokyo",
    "Europe/London",
    "UTC",
)


class PreferencesForm(forms.ModelForm):
    class Meta:
        model = Preferences
        fields = ["language", "time_zone"]
        labels = {"language": gettext_lazy("Language"), "time_zone": gettext_lazy("Time zone")}
        help_texts = {
            "language": gettext_lazy("Empty: the language of the header's switch, or else of your browser."),
            "time_zone": gettext_lazy(
                "A zone name such as Asia/Shanghai or Europe/Berlin: every time on the pages is shown in it."
            ),
        }
        widgets = {
            "time_zone": forms.TextInput(attrs={"list": "time-zones", "autocomplete": "off", "spellcheck": "false"})
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["language"].choices = [("", _("Follow the browser")), *settings.LANGUAGES]
        self.fields["time_zone"].error_messages["required"] = _("Give a time zone, such as Asia/Shanghai.")

    def clean_time_zone(self) -> str:
        return self.cleaned_data["time_zone"].strip()


def zone_suggestions() -> list[str]:
    common = [zone for zone in COMMON_ZONES if zone in time_zone_names()]
    return common + sorted(time_zone_names() - set(common))


@login_required
def preferences(request: HttpRequest) -> HttpResponse:
    saved = Preferences.objects.filter(user=request.user).first() or Preferences(user=request.user)
    form = PreferencesForm(request.POST if request.method == "POST" else None, instance=saved)
    if request.method == "POST" and form.is_valid():
        chosen = form.save()
        # The next page is in the saved language and zone (portal.locale.UserLocaleMiddleware); so is this message.
        with translation.override(chosen.language or translation.get_language_from_request(request)):
            messages.success(request, _("Saved: your pages now use this language and time zone."))
        return redirect("preferences")
    context = {"form": form, "now": timezone.now(), "zones": zone_suggestions()}
    return render(request, "portal/preferences.html", context)

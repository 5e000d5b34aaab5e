"""Forms of the web pages."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms

from portal.models.tokens import TokenScope

MAX_EXPIRY_DAYS = 365


class ApiTokenForm(forms.Form):
    """Name, scope and optional lifetime of a new API token."""

    name = forms.CharField(max_length=80, initial="API token", strip=True)
    scope = forms.ChoiceField(choices=TokenScope.choices, initial=TokenScope.READ_WRITE)
    expires_in_days = forms.IntegerField(
        label="Expires in (days)",
        required=False,
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        help_text=f"1–{MAX_EXPIRY_DAYS}; leave empty for a token that does not expire.",
    )

    def expires_at(self, now: datetime) -> datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        return now + timedelta(days=days) if days else None

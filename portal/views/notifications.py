"""The user's e-mail choices: a low-balance threshold and job e-mails (billing.notifications).

The form sits on the billing page and posts here; a bad value comes back as this page with the
problem named (400), a good one goes back to the billing page.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods

from billing.notifications import save_settings, settings_for
from kernel.money import MICROS_PER_UNIT, format_amount, format_money, to_micros

MAX_THRESHOLD = 10**9  # currency units: far above any balance, below what the column holds


class EmailSettingsForm(forms.Form):
    low_balance_threshold = forms.CharField(
        label=format_lazy(_("E-mail me when my balance falls below ({symbol})"), symbol=settings.CURRENCY_SYMBOL),
        max_length=32,
        required=False,
        help_text=_("Once each time it falls below; 0 or empty turns it off."),
        widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off", "placeholder": "0.00"}),
    )
    job_emails = forms.BooleanField(label=_("E-mail me when a job finishes, fails or is stopped"), required=False)

    def clean_low_balance_threshold(self) -> int:
        text = (self.cleaned_data["low_balance_threshold"] or "0").strip().replace(",", "")
        text = text.removeprefix(settings.CURRENCY_SYMBOL).strip()
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise forms.ValidationError(_("Enter the threshold as a number, e.g. 20 or 20.00.")) from None
        if not value.is_finite() or value < 0:
            raise forms.ValidationError(_("Enter the threshold as a number of zero or more, e.g. 20.00."))
        if value > MAX_THRESHOLD:
            raise forms.ValidationError(
                _("The largest threshold is %(amount)s.") % {"amount": format_money(MAX_THRESHOLD * MICROS_PER_UNIT)}
            )
        if value != value.quantize(Decimal("0.01")):
            raise forms.ValidationError(_("Enter the threshold with at most two decimals."))
        return to_micros(value)


def form_for(user) -> EmailSettingsForm:
    choices = settings_for(user)
    threshold = format_amount(choices.low_balance_threshold) if choices.low_balance_threshold else ""
    return EmailSettingsForm(initial={"low_balance_threshold": threshold, "job_emails": choices.job_emails})


@login_required
@require_http_methods(["GET", "POST"])
def email_settings(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return render(request, "portal/billing/email_settings.html", {"email_form": form_for(request.user)})
    form = EmailSettingsForm(request.POST)
    if not form.is_valid():
        return render(request, "portal/billing/email_settings.html", {"email_form": form}, status=400)
    saved = save_settings(
        request.user,
        low_balance_threshold=form.cleaned_data["low_balance_threshold"],
        job_emails=form.cleaned_data["job_emails"],
    )
    threshold = saved.low_balance_threshold
    if threshold:
        message = (
            gettext("Saved: an e-mail when your balance falls below %(amount)s; job e-mails on.")
            if saved.job_emails
            else gettext("Saved: an e-mail when your balance falls below %(amount)s; job e-mails off.")
        ) % {"amount": format_money(threshold)}
    else:
        message = (
            gettext("Saved: no low-balance e-mails; job e-mails on.")
            if saved.job_emails
            else gettext("Saved: no low-balance e-mails; job e-mails off.")
        )
    messages.success(request, message)
    return redirect(reverse("billing") + "#emails")

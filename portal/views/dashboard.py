"""Signed-in pages: balance and ledger history (grouped as on the billing page), API tokens."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from base.formatting import format_duration
from billing.services.ledger import balance_of
from billing.services.statements import spend_rate
from fleet.choices import JobStatus
from fleet.models import Job
from kernel.money import format_money
from portal.forms import ApiTokenForm
from portal.models.tokens import ApiToken
from portal.views.billing import ledger_context
from workers.services.storage_quota import storage_use


def credit_stopped_jobs(user, days: int = 7):
    """Jobs stopped for credit lately: the dashboard says so, with the reason."""
    since = timezone.now() - timedelta(days=days)
    return Job.objects.filter(owner=user, status=JobStatus.STOPPED_NO_CREDIT, finished_at__gte=since)[:5]


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    rate = spend_rate(request.user)
    context = {
        "balance": balance_of(request.user),
        "spend_rate": f"{format_money(rate.per_hour)}/h" if rate.per_hour else "—",
        "balance_lasts": format_duration(rate.lasts_seconds),
        "this_month": timezone.localdate().strftime("%Y-%m"),
        "credit_stops": credit_stopped_jobs(request.user),
        # No job yet: the page leads with "Train your first model"; after that, a smaller "New training run".
        "has_jobs": Job.objects.filter(owner=request.user).exists(),
        "storage": storage_use(request.user),
        **ledger_context(request),
    }
    return render(request, "portal/dashboard.html", context)


@never_cache
@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST if request.method == "POST" else None)
    new_token = raw = None
    if request.method == "POST" and form.is_valid():
        new_token, raw = ApiToken.issue(
            request.user,
            name=form.cleaned_data["name"],
            scope=form.cleaned_data["scope"],
            expires_at=form.expires_at(timezone.now()),
        )
        form = ApiTokenForm()
    context = {
        "form": form,
        "tokens": request.user.api_tokens.all(),
        "new_token": new_token,
        "raw_token": raw,
        # For the ready-to-copy curl and CLI lines beside a new token: the address this page was reached at.
        "site_url": request.build_absolute_uri("/").rstrip("/"),
    }
    # The raw secret is rendered into this one response (never cached) and never stored: shown once.
    return render(request, "portal/tokens.html", context)


@require_POST
@login_required
def revoke_token(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    token.revoke()
    if request.htmx:
        return render(request, "partials/token_row.html", {"token": token})
    messages.success(request, _("Revoked the token “%(name)s”.") % {"name": token.name})
    return redirect("tokens")

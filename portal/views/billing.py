"""The billing page: balance, a card top-up through Stripe, recent payments, the ledger.

With Stripe's own Stripe.js the page mounts the Payment Element on the PaymentIntent this server
creates and confirms it in the browser (card, Alipay or WeChat Pay). Against localstripe (Stripe
test mode under `make run`), whose stand-in has only a card element, the browser tokenises the
card and this server confirms the PaymentIntent with that token. The card number never reaches
this server, and credit arrives only with the signed `payment_intent.succeeded` webhook; the page
polls until it does.

The ledger shows the meter's 5-second charges grouped per job and hour (billing.services.ledger_history);
a group opens to its single charges, fetched when opened (`ledger_group`).
"""

from __future__ import annotations

import secrets

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from billing.models import OperatorSettings, Payment
from billing.services.ledger import balance_of
from billing.services.ledger_history import HOUR, BadGroup, LedgerHistory, group_charges, hour_from_key
from billing.services.stripe_payments import topups
from billing.services.stripe_payments.config import (
    CardDeclined,
    PaymentError,
    is_configured,
    is_test_mode,
    uses_payment_element,
)
from kernel.money import format_amount, format_money, format_price
from portal.content_policy import allow_stripe
from portal.views.notifications import form_for as email_form_for

LEDGER_PAGE_SIZE = 25
NOT_CONFIGURED = _("Top-ups are not configured on this platform yet: the operator has not set the Stripe keys.")
TEST_MODE = _("Test mode: no real money. Use card 4242 4242 4242 4242, any future date, any CVC.")


class TopupForm(forms.Form):
    amount = forms.CharField(
        label=format_lazy(_("Amount ({symbol})"), symbol=settings.CURRENCY_SYMBOL),
        max_length=32,
        widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off", "placeholder": "50.00"}),
    )
    nonce = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def clean_amount(self) -> int:
        try:
            return topups.parse_topup_amount(self.cleaned_data["amount"])
        except PaymentError as error:
            raise forms.ValidationError(str(error)) from None


def payment_row(payment: Payment) -> dict:
    return {
        "created_at": payment.created_at,
        "payment_intent_id": payment.payment_intent_id,
        "status": payment.get_status_display(),
        "amount": payment.amount,
        "refunded": payment.refunded_amount,
    }


def new_nonce() -> str:
    """One per rendered form: the PaymentIntent's idempotency key, so a double submit creates one intent."""
    return secrets.token_urlsafe(18)


@never_cache
@login_required
@require_GET
@allow_stripe
def billing(request: HttpRequest) -> HttpResponse:
    limits = OperatorSettings.load()
    context = {
        "balance": balance_of(request.user),
        "configured": is_configured(),
        "not_configured": NOT_CONFIGURED,
        "test_mode": TEST_MODE if is_test_mode() else "",
        "element": "payment" if uses_payment_element() else "card",
        "form": TopupForm(initial={"nonce": new_nonce()}),
        "minimum": format_money(limits.topup_minimum),
        "maximum": format_money(limits.topup_maximum),
        "payments": [payment_row(payment) for payment in Payment.objects.filter(user=request.user)[:20]],
        "email_form": email_form_for(request.user),
        "stripe_js_url": settings.STRIPE_JS_URL,
        "publishable_key": settings.STRIPE_PUBLISHABLE_KEY,
        **ledger_context(request),
    }
    return render(request, "portal/billing/billing.html", context)


def ledger_context(request: HttpRequest) -> dict:
    """The page of the grouped ledger that `?page=` asks for (the last one when it is past the end)."""
    page = Paginator(LedgerHistory(request.user), LEDGER_PAGE_SIZE).get_page(request.GET.get("page"))
    return {"ledger_page": page, "ledger_rows": page.object_list}


@login_required
@require_GET
def ledger_group(request: HttpRequest, job_id: int, hour: int) -> HttpResponse:
    """The single meter charges of one job in one hour: a fragment for the opened row, or a page without JavaScript."""
    try:
        start = hour_from_key(hour)
    except BadGroup as error:
        return HttpResponse(str(error), status=400, content_type="text/plain; charset=utf-8")
    charges = list(group_charges(request.user, job_id, start))
    if not charges:
        raise Http404(gettext("None of your charges is in that job and hour."))
    context = {
        "charges": charges,
        "job_id": job_id,
        "hour": start,
        "hour_end": start + HOUR,
        "total": sum(charge.amount for charge in charges),
    }
    template = "portal/billing/_ledger_charges.html" if request.htmx else "portal/billing/ledger_charges.html"
    return render(request, template, context)


@login_required
@require_POST
def topup_create(request: HttpRequest) -> JsonResponse:
    if not is_configured():
        return JsonResponse({"detail": NOT_CONFIGURED}, status=503)
    form = TopupForm(request.POST)
    if not form.is_valid():
        errors = {field: [str(e) for e in errs] for field, errs in form.errors.items()}
        return JsonResponse({"detail": gettext("Please correct the amount."), "errors": errors}, status=400)
    try:
        intent = topups.create_topup(request.user, form.cleaned_data["amount"], nonce=form.cleaned_data["nonce"])
    except PaymentError as error:
        return JsonResponse({"detail": str(error)}, status=502)
    return JsonResponse(
        {
            "id": intent.id,
            "client_secret": intent.client_secret,
            "amount": format_amount(intent.amount),
            "currency": intent.currency,
            "status": intent.status,
            "payment_method_types": list(intent.payment_method_types),
        },
        status=201,
    )


@login_required
@require_POST
def topup_confirm(request: HttpRequest, payment_intent_id: str) -> JsonResponse:
    try:
        status = topups.confirm_topup(request.user, payment_intent_id, request.POST.get("token", ""))
    except CardDeclined as error:
        return JsonResponse({"detail": str(error), "declined": True}, status=402)
    except PaymentError as error:
        return JsonResponse({"detail": str(error)}, status=400)
    return JsonResponse({"status": status})


@never_cache
@login_required
@require_GET
def topup_status(request: HttpRequest, payment_intent_id: str) -> JsonResponse:
    try:
        state = topups.topup_status(request.user, payment_intent_id)
    except PaymentError as error:
        return JsonResponse({"detail": str(error)}, status=404)
    balance = balance_of(request.user)
    return JsonResponse({**state, "balance": format_money(balance), "balance_exact": format_price(balance)})

"""The billing page: balance, a card top-up through Stripe, recent payments.

The browser tokenises the card with Stripe.js (the number never reaches this server), this
server confirms the PaymentIntent with that token, and credit arrives only with the signed
`payment_intent.succeeded` webhook; the page polls until it does.
"""

from __future__ import annotations

import secrets

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from base.money import format_amount, format_price
from billing.models import OperatorSettings, Payment
from billing.services import stripe_payments as payments
from billing.services.ledger import balance_of
from portal.content_policy import allow_stripe

NOT_CONFIGURED = "Top-ups are not configured on this platform yet: the operator has not set the Stripe keys."


class TopupForm(forms.Form):
    amount = forms.CharField(
        label=f"Amount ({settings.CURRENCY_SYMBOL})",
        max_length=32,
        widget=forms.TextInput(attrs={"inputmode": "decimal", "autocomplete": "off", "placeholder": "50.00"}),
    )
    nonce = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def clean_amount(self) -> int:
        try:
            return payments.parse_topup_amount(self.cleaned_data["amount"])
        except payments.PaymentError as error:
            raise forms.ValidationError(str(error)) from None


def payment_row(payment: Payment) -> dict:
    return {
        "created_at": payment.created_at,
        "payment_intent_id": payment.payment_intent_id,
        "status": payment.get_status_display(),
        "amount": format_price(payment.amount),
        "refunded": format_price(payment.refunded_amount) if payment.refunded_amount else "",
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
        "balance": format_price(balance_of(request.user)),
        "configured": payments.is_configured(),
        "not_configured": NOT_CONFIGURED,
        "form": TopupForm(initial={"nonce": new_nonce()}),
        "minimum": format_price(limits.topup_minimum),
        "maximum": format_price(limits.topup_maximum),
        "payments": [payment_row(payment) for payment in Payment.objects.filter(user=request.user)[:20]],
        "stripe_js_url": settings.STRIPE_JS_URL,
        "publishable_key": settings.STRIPE_PUBLISHABLE_KEY,
    }
    return render(request, "portal/billing/billing.html", context)


@login_required
@require_POST
def topup_create(request: HttpRequest) -> JsonResponse:
    if not payments.is_configured():
        return JsonResponse({"detail": NOT_CONFIGURED}, status=503)
    form = TopupForm(request.POST)
    if not form.is_valid():
        errors = {field: [str(e) for e in errs] for field, errs in form.errors.items()}
        return JsonResponse({"detail": "Please correct the amount.", "errors": errors}, status=400)
    try:
        intent = payments.create_topup(request.user, form.cleaned_data["amount"], nonce=form.cleaned_data["nonce"])
    except payments.PaymentError as error:
        return JsonResponse({"detail": str(error)}, status=502)
    return JsonResponse(
        {
            "id": intent.id,
            "client_secret": intent.client_secret,
            "amount": format_amount(intent.amount),
            "currency": intent.currency,
            "status": intent.status,
        },
        status=201,
    )


@login_required
@require_POST
def topup_confirm(request: HttpRequest, payment_intent_id: str) -> JsonResponse:
    try:
        status = payments.confirm_topup(request.user, payment_intent_id, request.POST.get("token", ""))
    except payments.CardDeclined as error:
        return JsonResponse({"detail": str(error), "declined": True}, status=402)
    except payments.PaymentError as error:
        return JsonResponse({"detail": str(error)}, status=400)
    return JsonResponse({"status": status})


@never_cache
@login_required
@require_GET
def topup_status(request: HttpRequest, payment_intent_id: str) -> JsonResponse:
    try:
        state = payments.topup_status(request.user, payment_intent_id)
    except payments.PaymentError as error:
        return JsonResponse({"detail": str(error)}, status=404)
    return JsonResponse({**state, "balance": format_price(balance_of(request.user))})

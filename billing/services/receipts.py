"""Receipts of top-ups: written in the transaction that credits the payment, e-mailed once after it commits.

`record_receipt` is called by `credit_payment` right after the ledger transfer, inside its transaction and
under the payment's row lock, only when the credit is new: a duplicate or replayed webhook finds the payment
credited and writes nothing. The balance after is the wallet's balance at that moment (the wallet row is
locked by the transfer), stored, never recomputed. The e-mail is queued on commit and keyed
`receipt:<id>` in SentNotification, so a retried task sends nothing twice.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _

from billing.models import Account, Payment, PaymentMethodType, Receipt, SentNotification, Transaction
from billing.notifications import local_time, recipients_locale
from kernel.money import format_money

logger = logging.getLogger(__name__)
METHODS = set(PaymentMethodType.values)


def method_of(intent) -> str:
    """How a PaymentIntent was paid ("card", "alipay", "wechat_pay"); blank when Stripe's copy does not say.

    The intent is retrieved with its payment method expanded (billing.services.stripe_payments.webhooks),
    so its `type` is there; a card attached as a legacy card object (a localstripe token) is a card, and
    an intent that allowed one method type was paid with it.
    """
    method = _get(intent, "payment_method")
    if method is not None and not isinstance(method, str):
        kind = _get(method, "type") or ("card" if _get(method, "object") == "card" else "")
        if kind:
            return kind if kind in METHODS else ""
    elif isinstance(method, str) and method.startswith("card_"):
        return PaymentMethodType.CARD
    types = list(_get(intent, "payment_method_types") or [])
    if len(types) == 1 and types[0] in METHODS:
        return types[0]
    return ""


def _get(obj, name: str):
    try:
        return obj.get(name) if hasattr(obj, "get") else getattr(obj, name, None)
    except (AttributeError, KeyError):
        return None


def record_receipt(payment: Payment, txn: Transaction, wallet: Account, method: str) -> Receipt:
    """The receipt of a credit just posted; call inside the crediting transaction (the e-mail follows its commit)."""
    balance_after = Account.objects.values_list("balance", flat=True).get(pk=wallet.pk)
    receipt, created = Receipt.objects.get_or_create(
        payment=payment,
        defaults={
            "user_id": payment.user_id,
            "amount": payment.amount,
            "currency": payment.currency,
            "method": method if method in METHODS else "",
            "payment_intent_id": payment.payment_intent_id,
            "balance_after": balance_after,
            "credited_at": txn.created_at,
        },
    )
    if created:
        transaction.on_commit(lambda: _enqueue_receipt_email(receipt.pk))
    return receipt


def _enqueue_receipt_email(receipt_id: int) -> None:
    try:
        send_receipt_email.delay(receipt_id)
    except Exception as error:  # noqa: BLE001 - the credit has committed; a broken broker loses the e-mail only
        logger.warning("could not queue the e-mail of receipt %s: %s", receipt_id, error)


def method_label(receipt: Receipt) -> str:
    return receipt.get_method_display() if receipt.method else _("Not recorded")


@shared_task(ignore_result=True)
def send_receipt_email(receipt_id: int) -> None:
    receipt = Receipt.objects.select_related("user").filter(pk=receipt_id).first()
    if receipt is None or not receipt.user.email:
        return
    site = settings.SITE_URL.rstrip("/")
    # The key and the sending commit together: a failed send leaves no key, a retried task finds it.
    with transaction.atomic():
        try:
            with transaction.atomic():
                SentNotification.objects.create(key=f"receipt:{receipt.pk}", user=receipt.user)
        except IntegrityError:
            return  # sent already (a retried or duplicated task)
        with recipients_locale(receipt.user):
            context = {
                "user": receipt.user,
                "receipt": receipt,
                "amount": format_money(receipt.amount),
                "method": method_label(receipt),
                "when": local_time(receipt.credited_at),
                "balance_after": format_money(receipt.balance_after),
                "receipt_url": site + reverse("receipt", args=[receipt.pk]),
                "language": translation.get_language(),
            }
            subject = _("Starverse: receipt for your top-up of %(amount)s") % {"amount": context["amount"]}
            send_mail(
                subject,
                render_to_string("emails/receipt.txt", context),
                None,
                [receipt.user.email],
                html_message=render_to_string("emails/receipt.html", context),
            )

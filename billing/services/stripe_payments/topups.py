"""Top-ups: a PaymentIntent for the amount the user typed, confirmed (with a card token against a Stripe
stand-in), and credited to the wallet once, when the webhook says it succeeded (`credit_payment`, called by
billing.services.stripe_payments.webhooks).

The local Payment row follows its PaymentIntent; the credit's ledger key is `topup:{payment_intent_id}`, so
a duplicate, reordered or replayed event credits once.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import stripe
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from base.stored_text import StoredText
from billing.choices import AccountKind, TransactionKind
from billing.models import OperatorSettings, Payment, PaymentStatus
from billing.notifications import rearm_low_balance
from billing.services.ledger import platform_account, transfer, wallet_for
from billing.services.receipts import method_of, record_receipt
from billing.services.stripe_payments.config import (
    NONCE_RE,
    CardDeclined,
    PaymentError,
    configure_stripe,
    from_minor,
    payment_method_types,
    to_minor,
)
from kernel.money import format_money, to_micros

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopupIntent:
    """What the browser needs to confirm a top-up."""

    id: str
    client_secret: str
    amount: int  # micro-units
    currency: str
    status: str
    payment_method_types: tuple[str, ...] = ("card",)


def parse_topup_amount(raw) -> int:
    """A top-up amount typed by a user ("50", "50.5", "50.25") in micro-units, within the operator's limits."""
    text = str(raw if raw is not None else "").strip().replace(",", "")
    symbol = settings.CURRENCY_SYMBOL
    text = text.removeprefix(symbol).strip()
    try:
        value = Decimal(text)
    except (InvalidOperation, ValueError):
        raise PaymentError(_("Enter the amount as a number, e.g. 50 or 50.00.")) from None
    if not value.is_finite():
        raise PaymentError(_("Enter the amount as a number, e.g. 50 or 50.00."))
    limits = OperatorSettings.load()
    if value > 10**12:
        raise PaymentError(_("The largest top-up is %(amount)s.") % {"amount": format_money(limits.topup_maximum)})
    if value != value.quantize(Decimal("0.01")):
        raise PaymentError(_("Enter the amount with at most two decimals."))
    micros = to_micros(value)
    if micros < limits.topup_minimum:
        raise PaymentError(_("The smallest top-up is %(amount)s.") % {"amount": format_money(limits.topup_minimum)})
    if micros > limits.topup_maximum:
        raise PaymentError(_("The largest top-up is %(amount)s.") % {"amount": format_money(limits.topup_maximum)})
    return micros


def create_topup(user, micros: int, *, nonce: str) -> TopupIntent:
    """Create a PaymentIntent for `micros` and its pending Payment; one per (user, nonce)."""
    if not NONCE_RE.match(nonce or ""):
        raise PaymentError(_("The form expired; reload the page and try again."))
    configure_stripe()
    currency = settings.CURRENCY.lower()
    methods = payment_method_types(currency)
    # WeChat Pay on a web page shows a QR code to scan (the other clients are apps).
    options = {"wechat_pay": {"client": "web"}} if "wechat_pay" in methods else {}
    # Stripe dedupes by the idempotency key too; this local memo also covers Stripe stand-ins that don't.
    memo_key = f"topup-intent:{user.pk}:{nonce}"
    try:
        known = cache.get(memo_key)
        intent = stripe.PaymentIntent.retrieve(known) if known else None
        intent = intent or stripe.PaymentIntent.create(
            amount=to_minor(micros, currency),
            currency=currency,
            payment_method_types=methods,
            **({"payment_method_options": options} if options else {}),
            metadata={"user_id": str(user.pk), "platform": "starverse"},
            idempotency_key=f"topup-create:{user.pk}:{nonce}",
        )
    except stripe.StripeError as error:
        logger.warning("creating a PaymentIntent failed: %s", error)
        raise PaymentError(_("The payment service is unavailable; please try again in a minute.")) from error
    cache.set(memo_key, intent.id, 24 * 3600)
    payment = sync_payment(intent, user=user)
    if payment is None:
        raise PaymentError(_("The payment service answered in another currency; please contact support."))
    # localstripe leaves payment_method_types out of its answer: what was asked for is what it takes.
    types = tuple(getattr(intent, "payment_method_types", None) or methods)
    return TopupIntent(intent.id, intent.client_secret, payment.amount, payment.currency, intent.status, types)


def confirm_topup(user, payment_intent_id: str, token_id: str) -> str:
    """Attach the card tokenised by Stripe.js to the user's PaymentIntent and confirm it.

    Returns the PaymentIntent's status; raises CardDeclined with Stripe's message. The card
    number never reaches this server, only Stripe's token. Credit still waits for the webhook.
    """
    payment = Payment.objects.filter(user=user, payment_intent_id=payment_intent_id).first()
    if payment is None:
        raise PaymentError(_("No such top-up."))
    if not re.match(r"^tok_\w+$", token_id or ""):
        raise PaymentError(_("The card could not be read; please enter it again."))
    configure_stripe()
    try:
        token = stripe.Token.retrieve(token_id)
        stripe.PaymentIntent.modify(payment_intent_id, payment_method=token.card.id)
        intent = stripe.PaymentIntent.confirm(payment_intent_id, idempotency_key=f"topup-confirm:{token_id}")
    except stripe.CardError as error:
        mark_failed(payment_intent_id)
        raise CardDeclined(error.user_message or _("Your card was declined.")) from error
    except stripe.StripeError as error:
        logger.warning("confirming %s failed: %s", payment_intent_id, error)
        raise PaymentError(_("The payment service is unavailable; please try again in a minute.")) from error
    return intent.status


def topup_status(user, payment_intent_id: str) -> dict:
    payment = Payment.objects.filter(user=user, payment_intent_id=payment_intent_id).first()
    if payment is None:
        raise PaymentError(_("No such top-up."))
    return {"status": payment.status, "credited": payment.credited_id is not None}


# -- crediting ---------------------------------------------------------------------------------


def credit_payment(intent) -> Payment | None:
    """Credit a succeeded PaymentIntent to its user's wallet, once (ledger key `topup:{id}`)."""
    payment = sync_payment(intent)
    if payment is None:
        return None
    method = method_of(intent)
    with transaction.atomic():
        payment = Payment.objects.select_for_update().get(pk=payment.pk)
        if payment.credited_id:
            return payment
        wallet = wallet_for(payment.user)
        txn = transfer(
            key=f"topup:{intent.id}",
            kind=TransactionKind.TOPUP,
            source=platform_account(AccountKind.PAYMENT_CLEARING),
            destination=wallet,
            amount=payment.amount,
            memo=StoredText(gettext_noop("Top-up by card (%(payment)s)"), payment=intent.id),
        )
        payment.credited = txn
        payment.status = PaymentStatus.SUCCEEDED
        payment.save(update_fields=["credited", "status", "updated_at"])
        # The receipt (with the balance right after this credit) commits with the credit; its e-mail follows.
        record_receipt(payment, txn, wallet, method)
        rearm_low_balance(payment.user)
    return payment


def sync_payment(intent, user=None) -> Payment | None:
    """The local Payment for a PaymentIntent, created from Stripe's copy when this server never saw it."""
    if user is None:
        user = _user_of(intent)
        if user is None:
            logger.warning("PaymentIntent %s has no known user; ignored", intent.id)
            return None
    currency = str(intent.currency).upper()
    if currency != settings.CURRENCY.upper():
        logger.warning("PaymentIntent %s is in %s, not %s; ignored", intent.id, currency, settings.CURRENCY)
        return None
    payment, _ = Payment.objects.get_or_create(
        payment_intent_id=intent.id,
        defaults={"user": user, "amount": from_minor(intent.amount, currency), "currency": currency},
    )
    return payment


def _user_of(intent):
    metadata = intent.metadata.to_dict() if getattr(intent, "metadata", None) else {}
    user_id = metadata.get("user_id", "")
    if not str(user_id).isdigit():
        return None
    return get_user_model().objects.filter(pk=int(user_id)).first()


def mark_failed(payment_intent_id: str) -> None:
    # A failure never overrides a success: a late failure event of an earlier attempt changes nothing.
    Payment.objects.filter(payment_intent_id=payment_intent_id, status=PaymentStatus.PENDING).update(
        status=PaymentStatus.FAILED, updated_at=timezone.now()
    )

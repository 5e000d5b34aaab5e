"""Stripe top-ups: create and confirm PaymentIntents, take in webhooks, credit once, refund.

Money moves only here and only after re-reading the PaymentIntent from Stripe: a webhook's body
says which object changed, never how much to credit. Every outgoing call that
creates something carries a deterministic idempotency key, and every ledger posting has one too
(`topup:{payment_intent_id}`), so a duplicate, reordered or replayed event credits once.

Two ways to pay, one server flow: with real Stripe.js the page uses the Payment Element
(`stripe.confirmPayment`, card, Alipay or WeChat Pay for yuan: Alipay redirects back, WeChat Pay
shows a QR code); against localstripe's stand-in, which only has a card element, the page
tokenises the card and this server confirms the intent (`confirm_topup`). Either way the credit
comes only from the `payment_intent.succeeded` webhook.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from urllib.parse import urlparse

import stripe
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from base.money import MICROS_PER_UNIT, format_amount, format_money, to_micros
from billing.choices import AccountKind, TransactionKind
from billing.models import OperatorSettings, Payment, PaymentStatus, Refund, StripeEvent, Transaction
from billing.notifications import rearm_low_balance
from billing.services.ledger import (
    InsufficientFunds,
    balance_of,
    platform_account,
    reverse_transaction,
    transfer,
    wallet_for,
)

logger = logging.getLogger(__name__)

WEBHOOK_TOLERANCE_S = 300
# Currencies without a minor unit (Stripe's list); everything else here has two decimals.
ZERO_DECIMAL_CURRENCIES = {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv"}
HANDLED_EVENTS = {
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.created",
    "payment_intent.requires_action",
    "payment_intent.processing",
}
# What a top-up can be paid with, by currency; Alipay and WeChat Pay take yuan (they must be
# enabled on the Stripe account). Anything else: cards only.
PAYMENT_METHOD_TYPES = {"cny": ["card", "alipay", "wechat_pay"]}
TEST_KEY_PREFIXES = ("sk_test_", "rk_test_")
REAL_STRIPE_JS_HOST = "js.stripe.com"
NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


class PaymentError(Exception):
    """A top-up or refund that cannot go ahead; the message is safe to show to the user."""


class NotConfigured(PaymentError):
    """No Stripe keys in the settings."""


class CardDeclined(PaymentError):
    """Stripe refused the card; the message is Stripe's, e.g. "Your card was declined."."""


@dataclass(frozen=True)
class TopupIntent:
    """What the browser needs to confirm a top-up."""

    id: str
    client_secret: str
    amount: int  # micro-units
    currency: str
    status: str
    payment_method_types: tuple[str, ...] = ("card",)


# -- configuration -----------------------------------------------------------------------------


def is_configured() -> bool:
    return bool(settings.STRIPE_SECRET_KEY and settings.STRIPE_PUBLISHABLE_KEY)


def is_test_mode() -> bool:
    """A Stripe test key: no real money moves (the billing page says so, in production too)."""
    return is_configured() and settings.STRIPE_SECRET_KEY.startswith(TEST_KEY_PREFIXES)


def uses_payment_element() -> bool:
    """Whether the page loads Stripe's own Stripe.js (Payment Element); a stand-in has only a card element."""
    return urlparse(settings.STRIPE_JS_URL).hostname == REAL_STRIPE_JS_HOST


def payment_method_types(currency: str) -> list[str]:
    return list(PAYMENT_METHOD_TYPES.get(currency.lower(), ["card"]))


def _client() -> None:
    """Point the stripe library at the configured server; read settings each call (tests override them)."""
    if not is_configured():
        raise NotConfigured("Top-ups are not configured on this platform (no Stripe keys).")
    stripe.api_key = settings.STRIPE_SECRET_KEY
    stripe.api_base = settings.STRIPE_API_BASE


# -- amounts -----------------------------------------------------------------------------------


def minor_unit_micros(currency: str) -> int:
    """Micro-units in one of the currency's minor units (a fen is 10,000 micro-yuan)."""
    return MICROS_PER_UNIT if currency.lower() in ZERO_DECIMAL_CURRENCIES else MICROS_PER_UNIT // 100


def to_minor(micros: int, currency: str) -> int:
    unit = minor_unit_micros(currency)
    if micros % unit:
        raise PaymentError(f"{format_amount(micros)} cannot be charged in whole {currency.upper()} minor units.")
    return micros // unit


def from_minor(minor: int, currency: str) -> int:
    return int(minor) * minor_unit_micros(currency)


def parse_topup_amount(raw) -> int:
    """A top-up amount typed by a user ("50", "50.5", "50.25") in micro-units, within the operator's limits."""
    text = str(raw if raw is not None else "").strip().replace(",", "")
    symbol = settings.CURRENCY_SYMBOL
    text = text.removeprefix(symbol).strip()
    try:
        value = Decimal(text)
    except (InvalidOperation, ValueError):
        raise PaymentError("Enter the amount as a number, e.g. 50 or 50.00.") from None
    if not value.is_finite():
        raise PaymentError("Enter the amount as a number, e.g. 50 or 50.00.")
    limits = OperatorSettings.load()
    if value > 10**12:
        raise PaymentError(f"The largest top-up is {format_money(limits.topup_maximum)}.")
    if value != value.quantize(Decimal("0.01")):
        raise PaymentError("Enter the amount with at most two decimals.")
    micros = to_micros(value)
    if micros < limits.topup_minimum:
        raise PaymentError(f"The smallest top-up is {format_money(limits.topup_minimum)}.")
    if micros > limits.topup_maximum:
        raise PaymentError(f"The largest top-up is {format_money(limits.topup_maximum)}.")
    return micros


# -- creating and confirming PaymentIntents ----------------------------------------------------


def create_topup(user, micros: int, *, nonce: str) -> TopupIntent:
    """Create a PaymentIntent for `micros` and its pending Payment; one per (user, nonce)."""
    if not NONCE_RE.match(nonce or ""):
        raise PaymentError("The form expired; reload the page and try again.")
    _client()
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
        raise PaymentError("The payment service is unavailable; please try again in a minute.") from error
    cache.set(memo_key, intent.id, 24 * 3600)
    payment = _sync_payment(intent, user=user)
    if payment is None:
        raise PaymentError("The payment service answered in another currency; please contact support.")
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
        raise PaymentError("No such top-up.")
    if not re.match(r"^tok_\w+$", token_id or ""):
        raise PaymentError("The card could not be read; please enter it again.")
    _client()
    try:
        token = stripe.Token.retrieve(token_id)
        stripe.PaymentIntent.modify(payment_intent_id, payment_method=token.card.id)
        intent = stripe.PaymentIntent.confirm(payment_intent_id, idempotency_key=f"topup-confirm:{token_id}")
    except stripe.CardError as error:
        _mark_failed(payment_intent_id)
        raise CardDeclined(error.user_message or "Your card was declined.") from error
    except stripe.StripeError as error:
        logger.warning("confirming %s failed: %s", payment_intent_id, error)
        raise PaymentError("The payment service is unavailable; please try again in a minute.") from error
    return intent.status


def topup_status(user, payment_intent_id: str) -> dict:
    payment = Payment.objects.filter(user=user, payment_intent_id=payment_intent_id).first()
    if payment is None:
        raise PaymentError("No such top-up.")
    return {"status": payment.status, "credited": payment.credited_id is not None}


# -- webhooks ----------------------------------------------------------------------------------


def verify_webhook(payload: bytes, signature: str | None) -> dict:
    """The event, if `signature` signs exactly these bytes recently; raises ValueError otherwise."""
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret:
        raise ValueError("webhooks are not configured")
    if not signature:
        raise ValueError("missing Stripe-Signature header")
    try:
        stripe.Webhook.construct_event(payload, signature, secret, tolerance=WEBHOOK_TOLERANCE_S)
    except stripe.SignatureVerificationError as error:
        raise ValueError(str(error)) from error
    except (AttributeError, TypeError, ValueError) as error:  # signed, but not an event object
        raise ValueError("body is not a Stripe event") from error
    try:
        event = json.loads(payload)
    except ValueError as error:
        raise ValueError("body is not JSON") from error
    if not isinstance(event, dict) or not isinstance(event.get("id"), str) or not event.get("type"):
        raise ValueError("body is not a Stripe event")
    return event


def store_event(event: dict) -> bool:
    """Store the raw event once per id; True when it is new (and so must be processed)."""
    try:
        with transaction.atomic():
            StripeEvent.objects.create(id=event["id"], type=str(event["type"])[:100], payload=event)
    except IntegrityError:
        return False
    return True


def event_waiting(event_id: str) -> bool:
    """The event is stored and not processed yet (a redelivery of it must be queued again)."""
    return StripeEvent.objects.filter(pk=event_id, processed_at__isnull=True).exists()


def process_event(event_id: str) -> None:
    """Apply a stored event once: claim it, re-fetch its PaymentIntent from Stripe, sync the payment."""
    event = StripeEvent.objects.filter(pk=event_id, processed_at__isnull=True).first()
    if event is None:
        return
    if event.type in HANDLED_EVENTS:
        intent_id = str(((event.payload.get("data") or {}).get("object") or {}).get("id", ""))
        if not intent_id.startswith("pi_"):
            StripeEvent.objects.filter(pk=event_id).update(processed_at=timezone.now(), error="no PaymentIntent id")
            return
        _client()
        intent = stripe.PaymentIntent.retrieve(intent_id)  # outside any DB transaction: slow I/O
        _apply_intent(event.type, intent)
    # Conditional update: only the first of two concurrent processors records the outcome.
    StripeEvent.objects.filter(pk=event_id, processed_at__isnull=True).update(processed_at=timezone.now(), error="")


def _apply_intent(event_type: str, intent) -> None:
    if event_type == "payment_intent.succeeded" and intent.status == "succeeded":
        credit_payment(intent)
    elif event_type in ("payment_intent.payment_failed", "payment_intent.canceled") and intent.status != "succeeded":
        _sync_payment(intent)
        _mark_failed(intent.id)
    else:
        _sync_payment(intent)


def credit_payment(intent) -> Payment | None:
    """Credit a succeeded PaymentIntent to its user's wallet, once (ledger key `topup:{id}`)."""
    payment = _sync_payment(intent)
    if payment is None:
        return None
    with transaction.atomic():
        payment = Payment.objects.select_for_update().get(pk=payment.pk)
        if payment.credited_id:
            return payment
        txn = transfer(
            key=f"topup:{intent.id}",
            kind=TransactionKind.TOPUP,
            source=platform_account(AccountKind.PAYMENT_CLEARING),
            destination=wallet_for(payment.user),
            amount=payment.amount,
            memo=f"Top-up by card ({intent.id})",
        )
        payment.credited = txn
        payment.status = PaymentStatus.SUCCEEDED
        payment.save(update_fields=["credited", "status", "updated_at"])
        rearm_low_balance(payment.user)
    return payment


def _sync_payment(intent, user=None) -> Payment | None:
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


def _mark_failed(payment_intent_id: str) -> None:
    # A failure never overrides a success: a late failure event of an earlier attempt changes nothing.
    Payment.objects.filter(payment_intent_id=payment_intent_id, status=PaymentStatus.PENDING).update(
        status=PaymentStatus.FAILED, updated_at=timezone.now()
    )


# -- reconciliation ----------------------------------------------------------------------------


def reconcile_payments(since_s: int = 3 * 24 * 3600) -> list[str]:
    """Store and process recent `payment_intent.succeeded` events this server missed or left unprocessed."""
    _client()
    since = int(timezone.now().timestamp()) - since_s
    done = []
    events = stripe.Event.list(type="payment_intent.succeeded", created={"gte": since}, limit=100)
    for event in events.auto_paging_iter():
        store_event(event.to_dict())
        if StripeEvent.objects.filter(pk=event.id, processed_at__isnull=True).exists():
            process_event(event.id)
            done.append(event.id)
    return done


# -- refunds -----------------------------------------------------------------------------------


def refundable_micros(payment: Payment) -> int:
    """The most an operator can refund now: unrefunded part of the payment, capped by the unspent balance."""
    if payment.credited_id is None:
        return 0
    return max(0, min(payment.amount - payment.refunded_amount, balance_of(payment.user)))


def refund_payment(payment: Payment, micros: int, *, reason: str, actor, nonce: str) -> Refund:
    """Refund `micros` of a credited payment: take it back from the wallet first, then refund on Stripe.

    The wallet is debited before the card is refunded, so money never leaves on Stripe while the
    user spends the same credit; a refused Stripe call is undone by reversing that debit. Refund
    rows are append-only, so the row is written last, once Stripe has answered.
    """
    reason = (reason or "").strip()
    if not reason:
        raise PaymentError("A refund needs a reason.")
    if micros <= 0:
        raise PaymentError("A refund amount must be positive.")
    if not NONCE_RE.match(nonce or ""):
        raise PaymentError("The form expired; reload the page and try again.")
    to_minor(micros, payment.currency)
    key = f"refund:{nonce}"
    existing = Refund.objects.filter(transaction__idempotency_key=key).first()
    if existing:
        return existing  # a resubmitted form
    txn = _reserve_refund(payment.pk, micros, reason=reason, actor=actor, key=key)
    _client()
    try:
        stripe_refund = stripe.Refund.create(
            payment_intent=payment.payment_intent_id,
            amount=to_minor(micros, payment.currency),
            metadata={"reason": reason[:400], "ledger_transaction": str(txn.pk)},
            idempotency_key=key,
        )
    except stripe.StripeError as error:
        _undo_reservation(payment.pk, txn, micros, str(error))
        raise PaymentError(f"Stripe refused the refund: {error.user_message or error}") from error
    try:
        return Refund.objects.create(
            payment=payment,
            stripe_refund_id=stripe_refund.id,
            amount=micros,
            reason=reason[:400],
            transaction=txn,
            created_by=actor,
        )
    except IntegrityError:  # the same form, submitted twice at once
        return Refund.objects.get(transaction=txn)


def _reserve_refund(payment_pk: int, micros: int, *, reason: str, actor, key: str):
    with transaction.atomic():
        payment = Payment.objects.select_for_update().select_related("user").get(pk=payment_pk)
        earlier = Transaction.objects.filter(idempotency_key=key).first()
        if earlier is not None:
            if Transaction.objects.filter(reverses=earlier).exists():
                raise PaymentError("This refund failed earlier; reload the page to try again.")
            return earlier  # an attempt that stopped before Stripe answered: finish it
        if payment.credited_id is None:
            raise PaymentError("Only a credited payment can be refunded.")
        unrefunded = payment.amount - payment.refunded_amount
        if micros > unrefunded:
            raise PaymentError(
                f"Refusing to refund {format_money(micros)}: only "
                f"{format_money(unrefunded)} of this payment is not yet refunded."
            )
        try:
            txn = transfer(
                key=key,
                kind=TransactionKind.REFUND,
                source=wallet_for(payment.user),
                destination=platform_account(AccountKind.PAYMENT_CLEARING),
                amount=micros,
                memo=f"Refund of top-up {payment.payment_intent_id}: {reason}",
                actor=actor,
            )
        except InsufficientFunds:
            raise PaymentError(
                f"Refusing to refund {format_money(micros)}: the user's unspent balance is only "
                f"{format_money(balance_of(payment.user))}."
            ) from None
        _set_refunded(payment, payment.refunded_amount + micros)
    return txn


def _undo_reservation(payment_pk: int, txn, micros: int, why: str) -> None:
    with transaction.atomic():
        payment = Payment.objects.select_for_update().get(pk=payment_pk)
        reverse_transaction(txn, reason=f"Stripe refused the refund: {why}"[:400])
        _set_refunded(payment, payment.refunded_amount - micros)


def _set_refunded(payment: Payment, refunded: int) -> None:
    payment.refunded_amount = refunded
    if refunded == 0:
        payment.status = PaymentStatus.SUCCEEDED
    elif refunded == payment.amount:
        payment.status = PaymentStatus.REFUNDED
    else:
        payment.status = PaymentStatus.PARTIALLY_REFUNDED
    payment.save(update_fields=["refunded_amount", "status", "updated_at"])

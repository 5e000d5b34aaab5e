"""Stripe's webhooks: verify the signature on the raw body, store the raw event once, process it once.

Processing re-reads the PaymentIntent from Stripe (a webhook's body says which object changed, never how
much to credit) and lets billing.services.stripe_payments.topups sync or credit its payment. Events this
server missed are fetched from Stripe's Events API (`reconcile_payments`).
"""

from __future__ import annotations

import json

import stripe
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import StripeEvent
from billing.services.stripe_payments.config import configure_stripe
from billing.services.stripe_payments.topups import credit_payment, mark_failed, sync_payment

WEBHOOK_TOLERANCE_S = 300
HANDLED_EVENTS = {
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.created",
    "payment_intent.requires_action",
    "payment_intent.processing",
}


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
        configure_stripe()
        # Outside any DB transaction: slow I/O. The payment method, expanded, says how it was paid (the receipt).
        intent = stripe.PaymentIntent.retrieve(intent_id, expand=["payment_method"])
        _apply_intent(event.type, intent)
    # Conditional update: only the first of two concurrent processors records the outcome.
    StripeEvent.objects.filter(pk=event_id, processed_at__isnull=True).update(processed_at=timezone.now(), error="")


def _apply_intent(event_type: str, intent) -> None:
    if event_type == "payment_intent.succeeded" and intent.status == "succeeded":
        credit_payment(intent)
    elif event_type in ("payment_intent.payment_failed", "payment_intent.canceled") and intent.status != "succeeded":
        sync_payment(intent)
        mark_failed(intent.id)
    else:
        sync_payment(intent)


# -- reconciliation ----------------------------------------------------------------------------


def reconcile_payments(since_s: int = 3 * 24 * 3600) -> list[str]:
    """Store and process recent `payment_intent.succeeded` events this server missed or left unprocessed."""
    configure_stripe()
    since = int(timezone.now().timestamp()) - since_s
    done = []
    events = stripe.Event.list(type="payment_intent.succeeded", created={"gte": since}, limit=100)
    for event in events.auto_paging_iter():
        store_event(event.to_dict())
        if StripeEvent.objects.filter(pk=event.id, processed_at__isnull=True).exists():
            process_event(event.id)
            done.append(event.id)
    return done

"""Periodic billing work; each task is a thin wrapper over a service."""

from __future__ import annotations

import logging

import stripe
from celery import shared_task

from base import heartbeats
from billing.models import StripeEvent

# The e-mail tasks live with what decides to send them; imported so every worker registers them.
from billing.notifications import send_job_end_email, send_low_balance_email  # noqa: F401
from billing.services.ledger import audit_ledger as find_ledger_problems
from billing.services.meter import run_meter as charge_due_allocations
from billing.services.receipts import send_receipt_email  # noqa: F401
from billing.services.stripe_payments.webhooks import process_event

logger = logging.getLogger(__name__)


@shared_task
def audit_ledger() -> int:
    """Check that every currency's entries sum to zero and balances equal their entries."""
    problems = find_ledger_problems()
    for problem in problems:
        logger.error("ledger audit: %s", problem)
    heartbeats.mark("ledger_audit", problems=len(problems))  # /metrics: starverse_ledger_audit_*
    return len(problems)


@shared_task(ignore_result=True, soft_time_limit=60)
def run_meter() -> None:
    """Charge every open allocation up to now; a second beat or a redelivery charges nothing twice."""
    result = charge_due_allocations()
    heartbeats.mark("meter")  # /metrics: the meter ran
    if result.charges:
        logger.info("meter: %d allocation(s) charged, %d chip-second(s)", result.charges, result.seconds)


# -- Stripe top-ups ------------------------------------------------------------------------------


@shared_task(bind=True, max_retries=8, acks_late=True)
def process_stripe_event(self, event_id: str) -> None:
    """Apply one stored Stripe event; a retry or duplicate delivery is a no-op (credit key per PaymentIntent)."""
    try:
        process_event(event_id)
    except (stripe.APIConnectionError, stripe.APIError, stripe.RateLimitError) as error:  # transient
        StripeEvent.objects.filter(pk=event_id).update(error=str(error)[:2000])
        raise self.retry(exc=error, countdown=min(300, 5 * 2**self.request.retries)) from error

"""The Stripe webhook endpoint: verify, store, enqueue, answer. Nothing slow happens here."""

from __future__ import annotations

import logging

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from billing.services.stripe_payments import store_event, verify_webhook

logger = logging.getLogger(__name__)


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    """Stripe retries anything but a 2xx, so a bad signature is a 400 and a duplicate a quiet 200."""
    try:
        # The signature covers the exact bytes sent: verify request.body, never a re-serialised copy.
        event = verify_webhook(request.body, request.headers.get("Stripe-Signature"))
    except ValueError as error:
        logger.warning("rejected a Stripe webhook: %s", error)
        return JsonResponse({"detail": f"Invalid webhook: {error}"}, status=400)
    if store_event(event):
        from billing.tasks import process_stripe_event

        transaction.on_commit(lambda: process_stripe_event.delay(event["id"]))
        return JsonResponse({"received": event["id"]})
    return JsonResponse({"received": event["id"], "duplicate": True})

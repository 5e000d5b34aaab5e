"""The Stripe webhook endpoint: verify, store, enqueue, answer. Nothing slow happens here."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from kombu.exceptions import OperationalError

from billing.services.stripe_payments.webhooks import event_waiting, store_event, verify_webhook
from billing.tasks import process_stripe_event

logger = logging.getLogger(__name__)
RETRY_AFTER_S = 30


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
    fresh = store_event(event)
    if not fresh and not event_waiting(event["id"]):
        return JsonResponse({"received": event["id"], "duplicate": True})
    try:
        # Sent now and checked: no periodic pass picks up stored events, so if the broker is down
        # Stripe must deliver again later (and a redelivery of an unprocessed event is queued again).
        process_stripe_event.delay(event["id"])
    except OperationalError as error:
        logger.warning("Stripe event %s stored but not queued (%s): 503, Stripe retries", event["id"], error)
        response = JsonResponse({"detail": "The task queue is unavailable; deliver again later."}, status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
    return JsonResponse({"received": event["id"], **({} if fresh else {"duplicate": True})})

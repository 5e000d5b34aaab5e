"""REST API for top-ups: `POST /api/v1/topups/` creates a PaymentIntent to confirm with Stripe.js."""

from __future__ import annotations

import hashlib
import re
import uuid

from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.docs import IDEMPOTENT_WRITE_ERRORS, VALIDATION_EXAMPLE, errors
from base.api.idempotency import IDEMPOTENCY_KEY_PARAMETER, idempotent
from base.api.validation import refuse_unknown_fields
from billing.services.stripe_payments import topups
from billing.services.stripe_payments.config import PaymentError, is_configured
from kernel.money import format_amount

# Stripe nonces are "api-" + this, and stripe_payments.config.NONCE_RE allows 64 characters in all.
IDEMPOTENCY_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{8,60}$")


def stripe_nonce(key: str) -> str:
    """The Stripe idempotency nonce for a request: its key (hashed if Stripe's pattern refuses it), else random."""
    if not key:
        return uuid.uuid4().hex
    return key if IDEMPOTENCY_KEY_RE.match(key) else hashlib.sha256(key.encode()).hexdigest()[:40]


class TopupsNotConfigured(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = gettext_lazy("Top-ups are not configured on this platform (no Stripe keys).")


class PaymentServiceUnavailable(APIException):
    status_code = status.HTTP_502_BAD_GATEWAY
    default_detail = gettext_lazy("The payment service is unavailable; please try again in a minute.")


class TopupRequestSerializer(serializers.Serializer):
    amount = serializers.CharField(help_text='Amount in the platform currency, at most two decimals, e.g. "50.00".')

    def validate_amount(self, value: str) -> int:
        try:
            return topups.parse_topup_amount(value)
        except PaymentError as error:
            raise serializers.ValidationError(str(error)) from None


class TopupSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The Stripe PaymentIntent id.")
    client_secret = serializers.CharField(help_text="Confirm the payment with Stripe.js using this secret.")
    amount = serializers.CharField()
    currency = serializers.CharField()
    status = serializers.CharField()


class TopupCreateView(APIView):
    """Start a card top-up. Credit is added only when Stripe confirms the payment (signed webhook).

    Send an `Idempotency-Key` header to make a retried request return the same PaymentIntent.
    """

    @extend_schema(
        summary="Start a card top-up",
        request=TopupRequestSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: TopupSerializer, **errors(*IDEMPOTENT_WRITE_ERRORS, 502, 503)},
        examples=[
            OpenApiExample("Top up 50", value={"amount": "50.00"}, request_only=True),
            OpenApiExample(
                "A PaymentIntent to confirm",
                value={
                    "id": "pi_3Nexample",
                    "client_secret": "pi_3Nexample_secret_abc",
                    "amount": "50.00",
                    "currency": "cny",
                    "status": "requires_payment_method",
                },
                response_only=True,
                status_codes=["201"],
            ),
            VALIDATION_EXAMPLE,
        ],
    )
    @idempotent
    def post(self, request):
        if not is_configured():
            raise TopupsNotConfigured()
        serializer = TopupRequestSerializer(data=request.data)
        refuse_unknown_fields(serializer, read_only=TopupSerializer().fields)
        serializer.is_valid(raise_exception=True)
        nonce = stripe_nonce(request.headers.get("Idempotency-Key", ""))
        try:
            intent = topups.create_topup(request.user, serializer.validated_data["amount"], nonce=f"api-{nonce}")
        except PaymentError as error:
            raise PaymentServiceUnavailable(str(error)) from error
        data = {
            "id": intent.id,
            "client_secret": intent.client_secret,
            "amount": format_amount(intent.amount),
            "currency": intent.currency,
            "status": intent.status,
        }
        return Response(TopupSerializer(data).data, status=status.HTTP_201_CREATED)

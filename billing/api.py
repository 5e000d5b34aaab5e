"""REST API for top-ups: `POST /api/v1/topups/` creates a PaymentIntent to confirm with Stripe.js."""

from __future__ import annotations

import re
import uuid

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.money import format_amount
from billing.services import stripe_payments as payments

IDEMPOTENCY_KEY_RE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


class TopupsNotConfigured(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Top-ups are not configured on this platform (no Stripe keys)."


class PaymentServiceUnavailable(APIException):
    status_code = status.HTTP_502_BAD_GATEWAY
    default_detail = "The payment service is unavailable; please try again in a minute."


class TopupRequestSerializer(serializers.Serializer):
    amount = serializers.CharField(help_text='Amount in the platform currency, at most two decimals, e.g. "50.00".')

    def validate_amount(self, value: str) -> int:
        try:
            return payments.parse_topup_amount(value)
        except payments.PaymentError as error:
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
        request=TopupRequestSerializer,
        responses={201: TopupSerializer, 400: OpenApiResponse(description="Bad amount"), 503: None},
    )
    def post(self, request):
        if not payments.is_configured():
            raise TopupsNotConfigured()
        serializer = TopupRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key", "")
        nonce = key if IDEMPOTENCY_KEY_RE.match(key) else uuid.uuid4().hex
        try:
            intent = payments.create_topup(request.user, serializer.validated_data["amount"], nonce=f"api-{nonce}")
        except payments.PaymentError as error:
            raise PaymentServiceUnavailable(str(error)) from error
        data = {
            "id": intent.id,
            "client_secret": intent.client_secret,
            "amount": format_amount(intent.amount),
            "currency": intent.currency,
            "status": intent.status,
        }
        return Response(TopupSerializer(data).data, status=status.HTTP_201_CREATED)

"""Spot price history in the v1 API (`/api/v1/prices/history/`): public, newest first."""

from __future__ import annotations

from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, permissions
from rest_framework.exceptions import ValidationError

from base.api.docs import errors
from billing.models import SpotPrice
from fleet.models import ChipType
from market.api.serializers import SpotPriceSerializer


@extend_schema(
    summary="Spot price history",
    description="Clearing prices of one chip type, newest first; a row is kept whenever the market changed.",
    parameters=[
        OpenApiParameter("chip", str, required=True, description="Chip type slug"),
        OpenApiParameter("since", str, required=False, description="ISO 8601 time: only clearings after it"),
    ],
    responses={200: SpotPriceSerializer(many=True), **errors(400, 401, 429)},
)
class PriceHistoryView(generics.ListAPIView):
    serializer_class = SpotPriceSerializer
    permission_classes = [permissions.AllowAny]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return SpotPrice.objects.none()
        slug = self.request.query_params.get("chip")
        if not slug:
            raise ValidationError({"chip": [gettext("Give a chip type, e.g. ?chip=rtx-4090.")]})
        if not ChipType.objects.filter(slug=slug).exists():
            raise ValidationError({"chip": [gettext("Unknown chip type '%(chip)s'.") % {"chip": slug}]})
        prices = SpotPrice.objects.filter(chip_type__slug=slug).select_related("chip_type")
        if since := self.request.query_params.get("since"):
            try:
                moment = parse_datetime(since)
            except ValueError:  # well-formed but impossible, e.g. 2024-02-30T00:00
                moment = None
            if moment is None:
                raise ValidationError({"since": [gettext("'%(given)s' is not an ISO 8601 time.") % {"given": since}]})
            prices = prices.filter(at__gt=moment)
        return prices

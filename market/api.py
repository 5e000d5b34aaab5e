"""Bids and spot price history in the v1 API (`/api/v1/bids/`, `/api/v1/prices/history/`)."""

from __future__ import annotations

import re
from decimal import Decimal

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from base.api.docs import IDEMPOTENT_WRITE_ERRORS, WRITE_ERRORS, errors
from base.api.fields import MoneyField, MoneyInputField
from base.api.idempotency import IDEMPOTENCY_KEY_PARAMETER, idempotent
from base.api.validation import refuse_unknown_fields
from base.money import to_micros
from billing.models import SpotPrice
from market.models import Bid
from market.services.bids import BidRefused, cancel_bid, change_bid, place_bid
from workers.models import ChipType, Job

JOB_ID = re.compile(r"^[0-9]{1,18}$")
PRICE = {"max_value": Decimal("1000000")}


class BidSerializer(serializers.ModelSerializer):
    chip = serializers.SlugRelatedField(source="chip_type", slug_field="slug", read_only=True)
    max_price = MoneyField(source="max_price_per_hour", help_text="Most paid per chip-hour, in currency units")
    clearing_price = MoneyField(help_text="The last clearing price of this chip type for this bid")
    job = serializers.PrimaryKeyRelatedField(read_only=True)
    reserved_charge = MoneyField(
        help_text="Charged so far for chips the bid won that its job didn't hold yet: they are billed from the "
        "moment they are won (the spot price each second) until the job holds them or the bid stops winning them"
    )
    reserved_since = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="Since when chips won and not yet held are kept and billed for this bid (charged when that ends)",
    )

    class Meta:
        model = Bid
        fields = [
            "id",
            "job",
            "chip",
            "chips",
            "max_price",
            "status",
            "won_chips",
            "clearing_price",
            "reserved_charge",
            "reserved_since",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class BidCreateSerializer(serializers.Serializer):
    job = serializers.IntegerField(min_value=1, help_text="One of your jobs that hasn't finished")
    chip = serializers.SlugField(help_text="Chip type slug, e.g. rtx-4090")
    chips = serializers.IntegerField(min_value=1, max_value=4096)
    max_price = MoneyInputField(**PRICE, help_text="Most you pay per chip-hour, in currency units")

    def validate_job(self, value: int) -> Job:
        job = Job.objects.filter(pk=value, owner=self.context["request"].user).first()
        if job is None:
            raise serializers.ValidationError(f"Job {value} not found.")
        return job

    def validate_chip(self, value: str) -> ChipType:
        chip = ChipType.objects.filter(slug=value).first()
        if chip is None:
            known = ", ".join(ChipType.objects.values_list("slug", flat=True))
            raise serializers.ValidationError(f"Unknown chip type '{value}'; known: {known}.")
        return chip


class BidChangeSerializer(serializers.Serializer):
    chips = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    max_price = MoneyInputField(**PRICE, required=False, help_text="New most-per-chip-hour: raise or lower")

    def validate(self, data):
        if not data:
            raise serializers.ValidationError({"max_price": ["Send max_price and/or chips to change."]})
        return data


class SpotPriceSerializer(serializers.ModelSerializer):
    chip = serializers.SlugRelatedField(source="chip_type", slug_field="slug", read_only=True)
    price_per_hour = MoneyField()
    floor_per_hour = MoneyField()

    class Meta:
        model = SpotPrice
        fields = ["chip", "at", "price_per_hour", "floor_per_hour", "capacity", "demand", "allocated"]
        read_only_fields = fields


def shown(bid: Bid) -> dict:
    """A bid as the API shows it, read back with what its reserved chips were charged."""
    return BidSerializer(Bid.objects.with_reservations().select_related("chip_type").get(pk=bid.pk)).data


def refused(error: BidRefused):
    return ValidationError({error.field: [str(error)]})


BID_EXAMPLE = OpenApiExample(
    "A bid", value={"job": 12, "chip": "rtx-4090", "chips": 2, "max_price": "2.50"}, request_only=True
)


@extend_schema_view(
    list=extend_schema(
        summary="Your bids",
        description="Newest first; `?status=active` and `?job=<id>` filter.",
        responses={200: BidSerializer(many=True), **errors(401, 429)},
    ),
    retrieve=extend_schema(summary="One of your bids", responses={200: BidSerializer, **errors(401, 404, 429)}),
)
class BidViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Spot bids: up to N chips of a type at up to a price per chip-hour, for one of your jobs."""

    serializer_class = BidSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Bid.objects.none()
        bids = Bid.objects.filter(owner=self.request.user).select_related("chip_type").with_reservations()
        if status_filter := self.request.query_params.get("status"):
            bids = bids.filter(status=status_filter)
        if (job := self.request.query_params.get("job")) and JOB_ID.match(job):  # not isdigit(): "²" is one
            bids = bids.filter(job_id=int(job))
        return bids

    @extend_schema(
        summary="Place a bid",
        description=(
            "Enters the chip type's auction at once (the market clears on every bid change and every few "
            "seconds). Only a live spot job's bid counts, and a placed job's only for the chips it holds. 400 "
            "names the field: `max_price` below the floor, `chips` more than exist (or than were picked for "
            "the job), `chip` unknown or a type the job could never run on (not among its picked chips or "
            "its plan's, or its model fits no such chip), `job` not yours, finished, stopping or not a spot "
            "job, `balance` too low to hold a few minutes of the bid on top of what your other bids and "
            "queued jobs hold. Chips the bid wins are yours to pay from the moment they are won, at the spot "
            "price, until your job runs on them or the bid stops winning them (`reserved_charge`)."
        ),
        request=BidCreateSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: BidSerializer, **errors(*IDEMPOTENT_WRITE_ERRORS)},
        examples=[BID_EXAMPLE],
    )
    @idempotent
    def create(self, request):
        form = BidCreateSerializer(data=request.data, context={"request": request})
        refuse_unknown_fields(form, read_only=BidSerializer().fields)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            bid = place_bid(
                request.user,
                job=data["job"],
                chip_type=data["chip"],
                chips=data["chips"],
                max_price_per_hour=to_micros(data["max_price"]),
            )
        except BidRefused as error:
            raise refused(error) from None
        return Response(shown(bid), status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Raise or lower a bid",
        description="Change the price and/or chips of an active bid; it keeps its time priority.",
        request=BidChangeSerializer,
        responses={200: BidSerializer, **errors(*WRITE_ERRORS, 404)},
    )
    def partial_update(self, request, pk=None):
        bid = self.get_object()
        form = BidChangeSerializer(data=request.data)
        refuse_unknown_fields(form, read_only=BidSerializer().fields)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            bid = change_bid(
                bid,
                chips=data.get("chips"),
                max_price_per_hour=to_micros(data["max_price"]) if "max_price" in data else None,
            )
        except BidRefused as error:
            raise refused(error) from None
        return Response(shown(bid))

    @extend_schema(
        summary="Cancel a bid",
        description="Withdraws the bid; a job running on chips it won is moved off them with notice.",
        request=None,
        responses={200: BidSerializer, **errors(*WRITE_ERRORS, 404)},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        try:
            bid = cancel_bid(self.get_object())
        except BidRefused as error:
            raise refused(error) from None
        return Response(shown(bid))


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
            raise ValidationError({"chip": ["Give a chip type, e.g. ?chip=rtx-4090."]})
        if not ChipType.objects.filter(slug=slug).exists():
            raise ValidationError({"chip": [f"Unknown chip type '{slug}'."]})
        prices = SpotPrice.objects.filter(chip_type__slug=slug).select_related("chip_type")
        if since := self.request.query_params.get("since"):
            try:
                moment = parse_datetime(since)
            except ValueError:  # well-formed but impossible, e.g. 2024-02-30T00:00
                moment = None
            if moment is None:
                raise ValidationError({"since": [f"'{since}' is not an ISO 8601 time."]})
            prices = prices.filter(at__gt=moment)
        return prices

"""Bids, spot price history and bid advice in the v1 API (`/api/v1/bids/`, `/api/v1/prices/history/`,
`/api/v1/market/advice/`).

A change or cancellation that would move a running job off its spot chips is refused with 409
(`code` `confirm_required`, `move` saying what would happen) unless the request says `confirm: true`.
A bid above the chip type's on-demand price is accepted, with a `warnings` list saying so.
"""

from __future__ import annotations

import re
from decimal import Decimal

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import generics, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.docs import IDEMPOTENT_WRITE_ERRORS, WRITE_ERRORS, errors
from base.api.fields import MoneyField, MoneyInputField
from base.api.idempotency import IDEMPOTENCY_KEY_PARAMETER, idempotent
from base.api.serializers import FieldsBuiltOnce
from base.api.validation import refuse_unknown_fields
from base.money import InvalidAmount, to_micros
from base.prepared import PreparedPage, PreparedQuery
from billing.models import SpotPrice
from market.advice import DEFAULT_DAYS
from market.models import Bid
from market.services.bids import BidRefused, cancel_bid, change_bid, place_bid
from market.services.hints import BidHint, bid_hint
from market.services.moves import JobMove, move_of_cancel, move_of_change
from workers.models import ChipType, Job

JOB_ID = re.compile(r"^[0-9]{1,18}$")
PRICE = {"max_value": Decimal("1000000")}
MAX_ADVICE_DAYS = 90
CONFIRM_HELP = (
    "Set true to make a change that moves your running job off its spot chips; without it such a change is "
    "refused with 409 (`code` confirm_required) saying where the job would go."
)


class BidSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
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


class BidResultSerializer(BidSerializer):
    warnings = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Accepted, but worth knowing: e.g. the bid is above the chip type's on-demand price",
    )

    class Meta(BidSerializer.Meta):
        fields = [*BidSerializer.Meta.fields, "warnings"]
        read_only_fields = fields


class MoveSerializer(serializers.Serializer):
    bid = serializers.IntegerField()
    job = serializers.IntegerField()
    chip = serializers.CharField()
    chips_lost = serializers.IntegerField(help_text="Spot chips the job would lose (any loss moves the whole job)")
    chips_held = serializers.IntegerField()
    to = serializers.CharField(allow_null=True, help_text='Where it would be re-planned now: "1 × TPU v5e (on-demand)"')
    price_per_hour_now = MoneyField()
    price_per_hour_after = MoneyField()


class ConfirmRequiredSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What the change would do, in one sentence")
    code = serializers.CharField(help_text="confirm_required")
    move = MoveSerializer()


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
    confirm = serializers.BooleanField(required=False, default=False, help_text=CONFIRM_HELP)

    def validate(self, data):
        if "chips" not in data and "max_price" not in data:
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


def confirm_required(move: JobMove) -> Response:
    """409: the change would move a running job; say where, and how to make it anyway."""
    body = {
        "detail": f"{move.message} Send confirm=true to go ahead.",
        "code": "confirm_required",
        "move": MoveSerializer(move.as_dict()).data,
    }
    return Response(body, status=status.HTTP_409_CONFLICT)


def with_warnings(bid: Bid) -> dict:
    """The bid as shown, with what is worth knowing about it (a price above on-demand)."""
    hint = bid_hint(bid.chip_type, bid.max_price_per_hour)
    return {**shown(bid), "warnings": hint.warnings}


class CancelSerializer(serializers.Serializer):
    confirm = serializers.BooleanField(required=False, default=False, help_text=CONFIRM_HELP)


def confirmed(request) -> bool:
    """`confirm` from the body or the query string (`?confirm=true`)."""
    form = CancelSerializer(data={"confirm": request.query_params.get("confirm", False)})
    form.is_valid(raise_exception=True)
    return form.validated_data["confirm"]


BID_EXAMPLE = OpenApiExample(
    "A bid", value={"job": 12, "chip": "rtx-4090", "chips": 2, "max_price": "2.50"}, request_only=True
)


def bids_of(owner: int, status: str | None = None, job: int | None = None):
    """A user's bids, newest first (the model's ordering), each with what its reservations charged."""
    bids = Bid.objects.filter(owner=owner).select_related("chip_type").with_reservations()
    if status is not None:
        bids = bids.filter(status=status)
    return bids.filter(job_id=job) if job is not None else bids


BID_PAGE = PreparedQuery(bids_of, owner=int, status=str, job=int)  # the list page's query, compiled once


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
        params = self.request.query_params
        job = int(params["job"]) if JOB_ID.match(params.get("job") or "") else None  # not isdigit(): "²" is one
        values = {"owner": self.request.user.pk, "status": params.get("status") or None, "job": job}
        if self.action == "list":
            return PreparedPage(BID_PAGE, **values)
        return bids_of(**values)

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
            "price, until your job runs on them or the bid stops winning them (`reserved_charge`). A bid above the "
            "chip type's on-demand price is placed, with a line in `warnings` saying so."
        ),
        request=BidCreateSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={201: BidResultSerializer, **errors(*IDEMPOTENT_WRITE_ERRORS)},
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
        return Response(with_warnings(bid), status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Raise or lower a bid",
        description=(
            "Change the price and/or chips of an active bid; it keeps its time priority. A change that would take "
            "spot chips from the bid's running job (lowered below the price that clears, or fewer chips than it "
            "holds) moves the whole job: refused with 409 (`code` confirm_required, `move` saying where it would "
            "go and at what price) unless `confirm` is true. A price above on-demand is accepted with `warnings`."
        ),
        request=BidChangeSerializer,
        responses={
            200: BidResultSerializer,
            409: OpenApiResponse(ConfirmRequiredSerializer, description="The change would move a running job."),
            **errors(*WRITE_ERRORS, 404),
        },
    )
    def partial_update(self, request, pk=None):
        bid = self.get_object()
        form = BidChangeSerializer(data=request.data)
        refuse_unknown_fields(form, read_only=BidSerializer().fields)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        price = to_micros(data["max_price"]) if "max_price" in data else None
        if not data["confirm"] and (move := move_of_change(bid, chips=data.get("chips"), max_price_per_hour=price)):
            return confirm_required(move)
        try:
            bid = change_bid(bid, chips=data.get("chips"), max_price_per_hour=price)
        except BidRefused as error:
            raise refused(error) from None
        return Response(with_warnings(bid))

    @extend_schema(
        summary="Cancel a bid",
        description=(
            "Withdraws the bid, and the job stops renting that chip type: its re-plans leave the type out, spot "
            "and on-demand, until a new bid for it is placed. When its job runs on chips the bid won, the job is "
            "moved off them with notice: refused with 409 (`code` confirm_required, `move` saying where the job "
            "would go) unless `confirm` is true (in the body or as `?confirm=true`)."
        ),
        request=CancelSerializer,
        parameters=[OpenApiParameter("confirm", bool, required=False, description=CONFIRM_HELP)],
        responses={
            200: BidSerializer,
            409: OpenApiResponse(ConfirmRequiredSerializer, description="The cancellation would move a running job."),
            **errors(*WRITE_ERRORS, 404),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        bid = self.get_object()
        form = CancelSerializer(data=request.data if isinstance(request.data, dict) else {})
        refuse_unknown_fields(form)
        form.is_valid(raise_exception=True)
        if not (form.validated_data["confirm"] or confirmed(request)) and (move := move_of_cancel(bid)):
            return confirm_required(move)
        try:
            bid = cancel_bid(bid)
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


class AdvicePointSerializer(serializers.Serializer):
    bid = MoneyField(help_text="A bid, per chip-hour")
    expected_hours = serializers.FloatField(allow_null=True, help_text="Mean uninterrupted hours at this bid")
    winning_share = serializers.FloatField(allow_null=True, help_text="Share of the history this bid was winning")


class AdviceSerializer(serializers.Serializer):
    chip = serializers.CharField()
    bid = MoneyField(help_text="The bid advised on (null when none was given)")
    spot_price = MoneyField(help_text="The clearing price now, per chip-hour")
    floor = MoneyField(help_text="The spot floor: no bid below it is accepted")
    on_demand_price = MoneyField(help_text="The on-demand price per chip-hour of this chip type")
    expected_hours = serializers.FloatField(
        allow_null=True,
        help_text="Mean length, in hours, of the runs of history where the clearing price stayed at or below the "
        "bid: how long the bid would be expected to keep its chips (null: no history)",
    )
    winning_share = serializers.FloatField(allow_null=True, help_text="Share (0-1) of the history the bid would win")
    runs = serializers.IntegerField(help_text="Separate winning runs in the history")
    winning_now = serializers.BooleanField(help_text="The clearing price now is at or below the bid")
    history_hours = serializers.FloatField(help_text="How much price history the advice rests on, in hours")
    days = serializers.FloatField(help_text="The window looked at, in days")
    summary = serializers.CharField(help_text='In words, or "No history yet"')
    warnings = serializers.ListField(child=serializers.CharField(), help_text="e.g. the bid is above on-demand")
    curve = AdvicePointSerializer(many=True, help_text="Expected uninterrupted hours against bid, cheapest first")


def advice_body(hint: BidHint) -> dict:
    advice = hint.advice
    return {
        "chip": hint.chip.slug,
        "bid": hint.bid,
        "spot_price": hint.spot_now,
        "floor": hint.floor,
        "on_demand_price": hint.on_demand,
        "expected_hours": _hours(advice.expected_hours) if advice else None,
        "winning_share": _share(advice.winning_share) if advice else None,
        "runs": advice.runs if advice else 0,
        "winning_now": advice.winning_now if advice else False,
        "history_hours": _hours(advice.history_hours) if advice else 0.0,
        "days": hint.days,
        "summary": advice.summary() if advice else "Give a bid to get advice on it.",
        "warnings": hint.warnings,
        "curve": [
            {
                "bid": point.bid,
                "expected_hours": _hours(point.expected_hours),
                "winning_share": _share(point.winning_share),
            }
            for point in hint.curve
        ],
    }


def _hours(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _share(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@extend_schema(
    summary="Bid advice",
    description=(
        "For a chip type and a bid: the spot price now, the floor, the on-demand price, and from the clearing "
        "price history of the last `days` (7 by default) the expected uninterrupted hours at that bid (mean "
        "length of the stretches where the price stayed at or below it), the share of the time it would have "
        'been winning and how much history that rests on (`summary` says "No history yet" when there is '
        "none). `curve` gives the expected hours at each bid level of the history, for charting."
    ),
    parameters=[
        OpenApiParameter("chip", str, required=True, description="Chip type slug, e.g. rtx-4090"),
        OpenApiParameter("bid", str, required=False, description="A bid per chip-hour, e.g. 0.80"),
        OpenApiParameter("days", int, required=False, description=f"History window in days (1-{MAX_ADVICE_DAYS})"),
    ],
    responses={200: AdviceSerializer, **errors(400, 429)},
)
class MarketAdviceView(APIView):
    permission_classes = [permissions.AllowAny]

    def get(self, request):
        params = request.query_params
        slug = params.get("chip")
        if not slug:
            raise ValidationError({"chip": ["Give a chip type, e.g. ?chip=rtx-4090."]})
        chip = ChipType.objects.filter(slug=slug).first()
        if chip is None:
            known = ", ".join(ChipType.objects.values_list("slug", flat=True))
            raise ValidationError({"chip": [f"Unknown chip type '{slug}'; known: {known}."]})
        bid = _bid_param(params.get("bid"))
        days = _days_param(params.get("days"))
        return Response(AdviceSerializer(advice_body(bid_hint(chip, bid, days=days, curve=True))).data)


def _bid_param(text: str | None) -> int | None:
    if text in (None, ""):
        return None
    try:
        bid = to_micros(text)
    except InvalidAmount as error:
        raise ValidationError({"bid": [str(error)]}) from None
    if not 0 < bid <= to_micros(PRICE["max_value"]):
        raise ValidationError({"bid": [f"'{text}' is not a price between 0.000001 and {PRICE['max_value']}."]})
    return bid


def _days_param(text: str | None) -> float:
    if text in (None, ""):
        return DEFAULT_DAYS
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_ADVICE_DAYS:
        raise ValidationError({"days": [f"Give a whole number of days from 1 to {MAX_ADVICE_DAYS}."]})
    return int(text)

"""Bids in the v1 API (`/api/v1/bids/`): place, list, raise or lower, cancel.

A change or cancellation that would move a running job off its spot chips is refused with 409
(`code` `confirm_required`, `move` saying what would happen) unless the request says `confirm: true`.
A bid above the chip type's on-demand price is accepted, with a `warnings` list saying so.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from base.api.docs import IDEMPOTENT_WRITE_ERRORS, WRITE_ERRORS, errors
from base.api.idempotency import IDEMPOTENCY_KEY_PARAMETER, idempotent
from base.api.validation import refuse_unknown_fields
from base.prepared import PreparedPage, PreparedQuery
from kernel.money import to_micros
from market.api.serializers import (
    CONFIRM_HELP,
    BidChangeSerializer,
    BidCreateSerializer,
    BidResultSerializer,
    BidSerializer,
    CancelSerializer,
    ConfirmRequiredSerializer,
    MoveSerializer,
)
from market.models import Bid
from market.services.bids import BidRefused, cancel_bid, change_bid, place_bid
from market.services.hints import bid_hint
from market.services.moves import JobMove, move_of_cancel, move_of_change

JOB_ID = re.compile(r"^[0-9]{1,18}$")


def shown(bid: Bid) -> dict:
    """A bid as the API shows it, read back with what its reserved chips were charged."""
    return BidSerializer(Bid.objects.with_reservations().select_related("chip_type").get(pk=bid.pk)).data


def refused(error: BidRefused):
    return ValidationError({error.field: [str(error)]})


def confirm_required(move: JobMove) -> Response:
    """409: the change would move a running job; say where, and how to make it anyway."""
    body = {
        "detail": gettext("%(move)s Send confirm=true to go ahead.") % {"move": move.message},
        "code": "confirm_required",
        "move": MoveSerializer(move.as_dict()).data,
    }
    return Response(body, status=status.HTTP_409_CONFLICT)


def with_warnings(bid: Bid) -> dict:
    """The bid as shown, with what is worth knowing about it (a price above on-demand)."""
    hint = bid_hint(bid.chip_type, bid.max_price_per_hour)
    return {**shown(bid), "warnings": hint.warnings}


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

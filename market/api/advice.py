"""Bid advice in the v1 API (`/api/v1/market/advice/`): for a chip type and a bid, the prices now and how
long the bid would have kept its chips in the recent clearing price history."""

from __future__ import annotations

from django.utils.translation import gettext
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from base.api.docs import errors
from fleet.models import ChipType
from kernel.money import InvalidAmount, to_micros
from market.advice import DEFAULT_DAYS
from market.api.serializers import PRICE, AdviceSerializer
from market.services.hints import BidHint, bid_hint

MAX_ADVICE_DAYS = 90


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
            raise ValidationError({"chip": [gettext("Give a chip type, e.g. ?chip=rtx-4090.")]})
        chip = ChipType.objects.filter(slug=slug).first()
        if chip is None:
            known = ", ".join(ChipType.objects.values_list("slug", flat=True))
            raise ValidationError(
                {"chip": [gettext("Unknown chip type '%(chip)s'; known: %(known)s.") % {"chip": slug, "known": known}]}
            )
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
        raise ValidationError(
            {
                "bid": [
                    gettext("'%(given)s' is not a price between 0.000001 and %(most)s.")
                    % {"given": text, "most": PRICE["max_value"]}
                ]
            }
        )
    return bid


def _days_param(text: str | None) -> float:
    if text in (None, ""):
        return DEFAULT_DAYS
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_ADVICE_DAYS:
        raise ValidationError(
            {"days": [gettext("Give a whole number of days from 1 to %(most)s.") % {"most": MAX_ADVICE_DAYS}]}
        )
    return int(text)

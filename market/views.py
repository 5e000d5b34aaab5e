"""The bids page (place, raise, lower, cancel) and the spot price history the pages chart.

Beside every bid input: the spot price now, the floor, the on-demand price and the bid's advice
(static/js/spot.js asks the API as you type); a bid above on-demand is placed with a warning. A change
or cancellation that would move a running job shows what would happen and waits for a confirmation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Case, IntegerField, Value, When
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from billing.models import SpotPrice
from billing.services.pricing import current_offers
from fleet.models import ChipType
from kernel.money import format_amount, format_price
from market.chart import price_ceiling
from market.forms import BidChangeForm, BidForm
from market.models import Bid, BidStatus, MarketSettings
from market.services.bids import BidRefused, cancel_bid, change_bid, place_bid
from market.services.hints import bid_hint
from market.services.moves import JobMove, move_of_cancel, move_of_change

TEMPLATE = "market/bids.html"
PAST_BIDS = 20
HISTORY_HOURS = 24
MAX_HISTORY_HOURS = 24 * 7
# A chart needs the shape, not every clearing: the newest rows per chip type, at most this many.
MAX_POINTS = 2000


@dataclass(frozen=True)
class BidRow:
    """One bid on the page, with the form that raises or lowers it."""

    bid: Bid
    form: BidChangeForm | None

    @property
    def active(self) -> bool:
        return self.bid.status == BidStatus.ACTIVE


def user_bids(user):
    return (
        Bid.objects.filter(owner=user)
        .select_related("chip_type", "job")
        .with_reservations()
        .annotate(
            past=Case(When(status=BidStatus.ACTIVE, then=Value(0)), default=Value(1), output_field=IntegerField())
        )
        .order_by("past", "-created_at", "-id")
    )


def bid_rows(user, editing: tuple[int, BidChangeForm] | None = None) -> list[BidRow]:
    """Active bids first, each with its change form (the bound one that failed, if any), then recent past bids."""
    bids = list(user_bids(user).filter(status=BidStatus.ACTIVE)) + list(
        user_bids(user).exclude(status=BidStatus.ACTIVE)[:PAST_BIDS]
    )
    rows = []
    for bid in bids:
        form = None
        if bid.status == BidStatus.ACTIVE:
            if editing and editing[0] == bid.pk:
                form = editing[1]
            else:
                form = BidChangeForm(
                    initial={"chips": bid.chips, "max_price": format_amount(bid.max_price_per_hour)},
                    auto_id=f"id_bid{bid.pk}_%s",
                )
        rows.append(BidRow(bid, form))
    return rows


@dataclass(frozen=True)
class PendingMove:
    """A change or cancellation that would move a running job, shown for confirmation with what to resend."""

    move: JobMove
    action: str  # the URL the confirmation posts to
    fields: dict[str, str]  # the change's own fields, sent again with confirm=1
    verb: str


def bids_context(
    request: HttpRequest, form: BidForm | None = None, editing=None, pending: PendingMove | None = None
) -> dict:
    offers = [offer for offer in current_offers() if offer.price]
    return {
        "form": form or BidForm(user=request.user),
        "rows": bid_rows(request.user, editing),
        "offers": offers,
        "notice_seconds": MarketSettings.load().notice_seconds,
        "advice_url": reverse("api-market-advice"),
        "advice_curves": advice_curves(offers),
        "pending": pending,
    }


def advice_curves(offers) -> list[dict]:
    """Per chip type with history: expected uninterrupted hours against bid, for the advice chart."""
    now = timezone.now()
    curves = []
    for offer in offers:
        hint = bid_hint(offer.chip, now=now, curve=True, offers=offers)
        if hint.curve:
            points = [[format_amount(point.bid), round(point.expected_hours, 3)] for point in hint.curve]
            curves.append({"chip": offer.chip.slug, "name": offer.chip.name, "points": points})
    return curves


def warn_above_on_demand(request: HttpRequest, bid: Bid) -> None:
    for warning in bid_hint(bid.chip_type, bid.max_price_per_hour).warnings:
        messages.warning(request, warning)


@login_required
def bids(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        initial = {"job": request.GET["job"]} if request.GET.get("job", "").isdigit() else None
        return render(request, TEMPLATE, bids_context(request, BidForm(user=request.user, initial=initial)))
    form = BidForm(request.POST, user=request.user)
    if form.is_valid():
        try:
            bid = place_bid(
                request.user,
                job=form.cleaned_data["job"],
                chip_type=form.cleaned_data["chip"],
                chips=form.cleaned_data["chips"],
                max_price_per_hour=form.max_price_per_hour,
            )
        except BidRefused as error:
            form.add_refusal(error)
        else:
            messages.success(
                request,
                _("Bid %(pk)s placed: the %(chip)s market clears it now.") % {"pk": bid.pk, "chip": bid.chip_type.name},
            )
            warn_above_on_demand(request, bid)
            return redirect("bids")
    return render(request, TEMPLATE, bids_context(request, form=form))


@require_POST
@login_required
def bid_change(request: HttpRequest, pk: int) -> HttpResponse:
    bid = get_object_or_404(Bid, pk=pk, owner=request.user)
    form = BidChangeForm(request.POST, auto_id=f"id_bid{bid.pk}_%s")
    if form.is_valid():
        old = bid.max_price_per_hour
        chips, price = form.cleaned_data["chips"], form.max_price_per_hour
        if not request.POST.get("confirm") and (move := move_of_change(bid, chips=chips, max_price_per_hour=price)):
            fields = {name: request.POST.get(name, "") for name in ("chips", "max_price")}
            pending = PendingMove(move, reverse("bid_change", args=[bid.pk]), fields, _("Change bid and move job"))
            return render(request, TEMPLATE, bids_context(request, pending=pending))
        try:
            bid = change_bid(bid, chips=chips, max_price_per_hour=price)
        except BidRefused as error:
            if error.field == "status":  # cancelled or closed: there is no form left to correct
                messages.error(request, str(error))
                return redirect("bids")
            form.add_refusal(error)
        else:
            if bid.max_price_per_hour > old:
                said = _("Bid %(pk)s raised: %(chips)s chip(s) at up to %(price)s per chip-hour.")
            elif bid.max_price_per_hour < old:
                said = _("Bid %(pk)s lowered: %(chips)s chip(s) at up to %(price)s per chip-hour.")
            else:
                said = _("Bid %(pk)s changed: %(chips)s chip(s) at up to %(price)s per chip-hour.")
            messages.success(
                request, said % {"pk": bid.pk, "chips": bid.chips, "price": format_price(bid.max_price_per_hour)}
            )
            warn_above_on_demand(request, bid)
            return redirect("bids")
    return render(request, TEMPLATE, bids_context(request, editing=(bid.pk, form)))


@require_POST
@login_required
def bid_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    bid = get_object_or_404(Bid, pk=pk, owner=request.user)
    if not request.POST.get("confirm") and (move := move_of_cancel(bid)):
        pending = PendingMove(move, reverse("bid_cancel", args=[bid.pk]), {}, _("Cancel bid and move job"))
        return render(request, TEMPLATE, bids_context(request, pending=pending))
    try:
        bid = cancel_bid(bid)
    except BidRefused as error:
        messages.error(request, str(error))
    else:
        messages.success(request, _("Bid %(pk)s cancelled.") % {"pk": bid.pk})
    return redirect("bids")


@never_cache
@require_GET
def spot_history(request: HttpRequest) -> JsonResponse:
    """Clearing prices of every chip type over the last `hours` (24 by default), oldest first, for the charts."""
    try:
        hours = min(max(int(request.GET.get("hours", HISTORY_HOURS)), 1), MAX_HISTORY_HOURS)
    except ValueError:
        return JsonResponse({"hours": [_("Give a whole number of hours.")]}, status=400)
    now = timezone.now()
    since = now - timedelta(hours=hours)
    series, paths = [], []
    for chip in ChipType.objects.all():
        rows = price_path(chip, since, now)
        if rows:
            paths.append([(row.at.timestamp(), row.price_per_hour) for row in rows])
            series.append(
                {
                    "chip": chip.slug,
                    "name": chip.name,
                    "points": [[int(row.at.timestamp() * 1000), format_amount(row.price_per_hour)] for row in rows],
                    "floor": format_amount(rows[-1].floor_per_hour),
                }
            )
    ceiling = price_ceiling(paths, since.timestamp(), now.timestamp())
    return JsonResponse(
        {
            "currency": settings.CURRENCY_SYMBOL,
            "since": since.isoformat(),
            "now": now.isoformat(),
            "series": series,
            # The price axis stops here when one spike would squeeze the other lines (null: at the highest price).
            "axis_max": format_amount(ceiling) if ceiling is not None else None,
        }
    )


def price_path(chip: ChipType, since, now) -> list[SpotPrice]:
    """The clearings in (since, now], led by the one in force at `since` so the line starts at the window's edge."""
    prices = SpotPrice.objects.filter(chip_type=chip)
    inside = list(prices.filter(at__gt=since, at__lte=now).order_by("-at", "-id")[:MAX_POINTS])
    before = prices.filter(at__lte=since).order_by("-at", "-id").first()
    if before is not None and len(inside) < MAX_POINTS:
        inside.append(before)
    return inside[::-1]

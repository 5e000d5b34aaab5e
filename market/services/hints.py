"""What to show beside a bid: the spot price now, the floor, the on-demand price, and the bid advice.

The advice itself is computed by the pure `market.advice` from the chip type's clearing history
(`billing.models.SpotPrice`); this module reads that history and the prices in force.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.translation import gettext

from billing.models import SpotPrice
from billing.services.pricing import ChipOffer, current_offers
from fleet.models import ChipType, Node
from kernel.money import format_price
from market.advice import DEFAULT_DAYS, BidAdvice, PricePoint, advice_curve, bid_advice

# The most clearings read for one chip type's advice; a row is kept only when the market changed.
MAX_HISTORY_ROWS = 50_000


@dataclass(frozen=True)
class BidHint:
    """One chip type's prices now and, for a given bid, the advice and warnings."""

    chip: ChipType
    spot_now: int | None
    floor: int | None
    on_demand: int | None
    days: float
    advice: BidAdvice | None = None
    curve: list[BidAdvice] = field(default_factory=list)

    @property
    def bid(self) -> int | None:
        return self.advice.bid if self.advice else None

    @property
    def above_on_demand(self) -> bool:
        return self.bid is not None and self.on_demand is not None and self.bid > self.on_demand

    @property
    def warnings(self) -> list[str]:
        return [above_on_demand_warning(self.chip, self.bid, self.on_demand)] if self.above_on_demand else []


def above_on_demand_warning(chip: ChipType, bid: int, on_demand: int) -> str:
    return gettext(
        "Your bid of %(bid)s/h is above the %(chip)s on-demand price of %(on_demand)s/h: "
        "on-demand chips of this type would cost less than this bid allows, and can't be taken back."
    ) % {"bid": format_price(bid), "chip": chip.name, "on_demand": format_price(on_demand)}


def history_of(chip: ChipType, now: datetime, days: float = DEFAULT_DAYS) -> list[PricePoint]:
    """The clearings of the last `days`, led by the one in force at the window's start."""
    since = now - timedelta(days=days)
    prices = SpotPrice.objects.filter(chip_type=chip, at__lte=now).order_by("-at", "-id")
    rows = list(prices.filter(at__gt=since).values_list("at", "price_per_hour")[:MAX_HISTORY_ROWS])
    before = prices.filter(at__lte=since).values_list("at", "price_per_hour").first()
    if before is not None and len(rows) < MAX_HISTORY_ROWS:
        rows.append(before)
    return [PricePoint(at, price) for at, price in rows]


def offer_of(chip: ChipType, offers: list[ChipOffer] | None = None) -> ChipOffer | None:
    return next((offer for offer in offers or current_offers() if offer.chip.pk == chip.pk), None)


def bid_hint(
    chip: ChipType,
    bid: int | None = None,
    *,
    now: datetime | None = None,
    days: float = DEFAULT_DAYS,
    curve: bool = False,
    offers: list[ChipOffer] | None = None,
) -> BidHint:
    """The hint for one chip type: prices now, and the advice for `bid` (and the whole curve when asked)."""
    now = now or timezone.now()
    offer = offer_of(chip, offers)
    floor = offer.price.spot_floor_per_hour if offer and offer.price else None
    on_demand = offer.on_demand_per_hour if offer else None
    history = history_of(chip, now, days) if bid is not None or curve else []
    return BidHint(
        chip=chip,
        spot_now=offer.spot_per_hour if offer else None,
        floor=floor,
        on_demand=on_demand,
        days=days,
        advice=bid_advice(history, bid, now, days) if bid is not None else None,
        curve=advice_curve(history, now, days, extra_bids=[p for p in (floor, on_demand) if p]) if curve else [],
    )


def spot_chip_types() -> set[str]:
    """Chip types (slugs) that take spot bids: those with spot-eligible chips on the platform, as a bid counts them."""
    eligible = Node.objects.filter(spot_eligible=True, chips__gt=0)
    return set(eligible.values_list("pool__chip_type__slug", flat=True).distinct())


def default_bid(offers: list[ChipOffer] | None = None) -> int | None:
    """A new spot job's bid unless its owner names one: the lowest on-demand price among the chip types that take
    spot bids (None when none does). Like a cloud's default spot limit it is never above on-demand, and here for
    any chip type, since one bid covers them all; types whose spot price is above it run on demand instead."""
    spot = spot_chip_types()
    offers = offers if offers is not None else current_offers()
    return min((offer.on_demand_per_hour for offer in offers if offer.chip.slug in spot and offer.price), default=None)


def bid_hints(bids: dict[str, int | None], now: datetime | None = None) -> list[BidHint]:
    """Hints for several chip types at once ({slug: bid or None}), in catalog order."""
    now = now or timezone.now()
    offers = current_offers(now)
    chips = ChipType.objects.filter(slug__in=bids)
    return [bid_hint(chip, bids[chip.slug], now=now, offers=offers) for chip in chips]

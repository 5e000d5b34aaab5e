"""The launch quote's chip lines with their prices, and for a spot job what runs on-demand and why.

A tester's spot job ran 2 of its 3 chips on-demand without the quote saying so: each line now says
spot or on-demand with its price (count × price per chip-hour = line price per hour), and a spot job
that will run chips on-demand gets a sentence naming the reason for each chip type.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext, ngettext

from billing.services.pricing import ChipOffer
from fleet.choices import AllocationMode
from kernel import planner
from kernel.money import format_price
from kernel.spec import JobSpec


@dataclass(frozen=True)
class QuoteLine:
    """ "2 × RTX 4090, spot: 2 × ¥0.64 = ¥1.28/h" """

    count: int
    slug: str
    name: str
    spot: bool
    simulated: bool
    price_per_chip: int | None

    @property
    def mode(self) -> str:
        return gettext("Spot") if self.spot else gettext("On-demand")

    @property
    def unit_price(self) -> str:
        return format_price(self.price_per_chip)

    @property
    def line_price(self) -> str:
        return format_price(None if self.price_per_chip is None else self.count * self.price_per_chip)


def quote_lines(plan: planner.Plan, offers: dict[str, ChipOffer]) -> list[QuoteLine]:
    """One line per chip type and mode, priced as the planner priced it (spot at the clearing price now)."""
    simulated = {rank.chip for rank in plan.ranks if rank.simulated}
    lines = []
    for slug, per_mode in plan.chip_counts.items():
        offer = offers.get(slug)
        for mode, count in sorted(per_mode.items(), key=lambda item: item[0] != AllocationMode.SPOT):
            spot = mode == AllocationMode.SPOT
            price = (offer.spot_per_hour if spot else offer.on_demand_per_hour) if offer else None
            name = offer.chip.name if offer else slug
            lines.append(QuoteLine(count, slug, name, spot, slug in simulated, price))
    return lines


def on_demand_note(spec: JobSpec, lines: list[QuoteLine], offers: dict[str, ChipOffer]) -> str:
    """For a spot job with chips on-demand: "2 of 3 chips run on-demand: the spot market has only 1 …"."""
    if not spec.spot:
        return ""
    on_demand = [line for line in lines if not line.spot]
    if not on_demand:
        return ""
    total = sum(line.count for line in lines)
    spot_counts = {line.slug: line.count for line in lines if line.spot}
    reasons = [
        _reason(line, spot_counts.get(line.slug, 0), spec.spot_bid_per_hour, offers.get(line.slug))
        for line in on_demand
    ]
    count = sum(line.count for line in on_demand)
    return gettext("%(count)s of %(total)s chips run on-demand: %(reasons)s.") % {
        "count": count,
        "total": total,
        "reasons": gettext("; ").join(reasons),
    }


def _reason(line: QuoteLine, spot_chips: int, bid: int | None, offer: ChipOffer | None) -> str:
    if offer is None or not offer.spot_capacity:  # no spot price to speak of: nobody sells it on spot
        return gettext("%(chip)s has no spot chips online") % {"chip": line.name}
    spot_price = offer.spot_per_hour
    on_demand = offer.on_demand_per_hour if offer else None
    if spot_price is not None and on_demand is not None and spot_price >= on_demand:
        return gettext("%(chip)s spot (%(price)s/h) costs no less than on-demand now") % {
            "chip": line.name,
            "price": format_price(spot_price),
        }
    if spot_price is not None and (bid or 0) < spot_price:
        return gettext("the %(chip)s spot price of %(price)s/h is above your bid of %(bid)s/h") % {
            "chip": line.name,
            "price": format_price(spot_price),
            "bid": format_price(bid),
        }
    if spot_chips:
        return ngettext(
            "the spot market has only %(count)s %(chip)s chip under your bid",
            "the spot market has only %(count)s %(chip)s chips under your bid",
            spot_chips,
        ) % {"count": spot_chips, "chip": line.name}
    return gettext("no %(chip)s spot chips are free under your bid") % {"chip": line.name}

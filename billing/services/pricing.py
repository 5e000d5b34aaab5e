"""Current prices per chip type and the price of a unit of work (the article's weighted cost)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone

from billing.models import Price
from billing.money import round_micros
from workers.models import REFERENCE_CHIP, ChipType


@dataclass(frozen=True)
class ChipOffer:
    """What one chip type costs now, and what a 4090-equivalent hour of its compute costs."""

    chip: ChipType
    price: Price | None
    capacity: int
    simulated_capacity: int
    spot_clearing: int | None = None  # the spot auction's last clearing price, if it has cleared
    spot_capacity: int = 0

    @property
    def on_demand_per_hour(self) -> int | None:
        return self.price.on_demand_per_hour if self.price else None

    @property
    def spot_per_hour(self) -> int | None:
        """The spot price now: the auction's clearing price, never below the floor in force."""
        if not self.price:
            return None
        return max(self.price.spot_floor_per_hour, self.spot_clearing or 0)

    def speedup(self, reference: ChipType) -> Decimal:
        """Delivered bf16 compute relative to the reference chip (an RTX 4090)."""
        return self.chip.delivered_tflops / reference.delivered_tflops

    def per_work_unit(self, per_hour: int | None, reference: ChipType) -> int | None:
        if per_hour is None:
            return None
        return round_micros(Decimal(per_hour) / self.speedup(reference))


def current_offers(now=None) -> list[ChipOffer]:
    """Every chip type with its price in force at `now` and its chip counts."""
    now = now or timezone.now()
    from market.services.market_state import latest_spot_prices

    prices = {price.chip_type_id: price for price in Price.objects.in_force(now)}
    clearing = latest_spot_prices(now)
    offers = []
    for chip in ChipType.objects.prefetch_related("pools__nodes"):
        nodes = [node for pool in chip.pools.all() for node in pool.nodes.all()]
        offers.append(
            ChipOffer(
                chip=chip,
                price=prices.get(chip.pk),
                capacity=sum(node.chips for node in nodes),
                simulated_capacity=sum(node.chips for node in nodes if node.simulated),
                spot_clearing=clearing[chip.pk].price_per_hour if chip.pk in clearing else None,
                spot_capacity=sum(node.chips for node in nodes if node.spot_eligible),
            )
        )
    return offers


def reference_chip(offers: list[ChipOffer]) -> ChipType:
    return next((offer.chip for offer in offers if offer.chip.slug == REFERENCE_CHIP), offers[0].chip)

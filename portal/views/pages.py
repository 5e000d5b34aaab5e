"""Public pages: the home page and the pricing table."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from billing.models import OperatorSettings
from billing.services.pricing import ChipOffer, current_offers, reference_chip
from fleet.models import ChipType
from kernel.money import format_money, format_price


@dataclass(frozen=True)
class PricingRow:
    """One chip type on the pricing page, its prices already formatted."""

    offer: ChipOffer
    on_demand: str
    spot: str
    on_demand_per_unit: str
    spot_per_unit: str

    @property
    def chip(self) -> ChipType:
        return self.offer.chip


def pricing_row(offer: ChipOffer, reference: ChipType) -> PricingRow:
    return PricingRow(
        offer=offer,
        on_demand=format_price(offer.on_demand_per_hour),
        spot=format_price(offer.spot_per_hour),
        # Worked out from a ratio of speeds, to the micro-unit: shown to the cent like every amount people read.
        on_demand_per_unit=format_money(offer.per_work_unit(offer.on_demand_per_hour, reference)),
        spot_per_unit=format_money(offer.per_work_unit(offer.spot_per_hour, reference)),
    )


def home(request: HttpRequest) -> HttpResponse:
    """What a visitor needs to decide: each chip type's prices now and how many are online, and how it works."""
    trial_credit = OperatorSettings.load().trial_credit
    offers = [offer for offer in current_offers() if offer.price]
    context = {
        "trial_credit": format_money(trial_credit) if trial_credit else "",
        "offers": offers,
        "chips_online": sum(offer.capacity for offer in offers),
        "simulated_online": sum(offer.simulated_capacity for offer in offers),
    }
    return render(request, "portal/home.html", context)


def pricing(request: HttpRequest) -> HttpResponse:
    offers = current_offers()
    reference = reference_chip(offers) if offers else None
    rows = [pricing_row(offer, reference) for offer in offers] if reference else []
    return render(request, "portal/pricing.html", {"rows": rows, "reference": reference})

"""The 24 h spot chart on the pricing page: one spike no longer squeezes the other prices into a flat line."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.models import SpotPrice
from fleet.models import ChipType

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def clearings(slug: str, cents_every_hour: list[int], spike_cents: int | None = None) -> None:
    """A day of hourly clearings for one chip type; with `spike_cents`, a two-minute spike eight hours ago."""
    chip = ChipType.objects.get(slug=slug)
    floor = chip.prices.order_by("-effective_at").first().spot_floor_per_hour
    now = timezone.now()
    rows = [(now - timedelta(hours=23 - hour), cents) for hour, cents in enumerate(cents_every_hour)]
    if spike_cents:
        spike = now - timedelta(hours=8, minutes=30)
        rows += [(spike, spike_cents), (spike + timedelta(minutes=2), cents_every_hour[15])]
    for at, cents in sorted(rows):
        price = cents * 10_000
        SpotPrice.objects.create(
            chip_type=chip, at=at, price_per_hour=price, floor_per_hour=floor, capacity=8, demand=4, allocated=4
        )


def y_axis(page: Page) -> dict:
    return page.evaluate(
        """() => { const chart = window.Chart.getChart(document.querySelector('#spot-price-chart'));
                   return {max: chart.scales.y.max, marked: chart.data.datasets.flatMap(d => d.data)
                                                             .filter(p => p.real !== undefined && !p.tail).length}; }"""
    )


def test_a_spike_is_drawn_at_the_edge_and_the_other_prices_keep_their_height(live_server, browser_page, screenshots):
    call_command("seed_catalog", stdout=io.StringIO())
    clearings("rtx-4090", [50 + (hour % 5) * 6 for hour in range(24)], spike_cents=980)
    clearings("ascend-910b", [60 + (hour % 4) * 5 for hour in range(24)])
    page = browser_page

    page.goto(f"{live_server.url}/pricing/")

    chart = page.get_by_test_id("spot-chart")
    expect(chart).to_have_attribute("data-drawn", "true")
    axis = y_axis(page)
    assert axis["max"] < 1.2, axis  # ¥0.75 is the highest usual price: not stretched to ¥9.80
    assert axis["marked"] == 1, axis  # the spike, as a triangle at the top edge
    expect(page.get_by_test_id("spot-chart-note")).to_contain_text("up to ¥9.80/h")
    chart.screenshot(path=str(screenshots / "spot-chart-spike.png"))


def test_without_a_spike_the_axis_shows_every_price(live_server, browser_page):
    call_command("seed_catalog", stdout=io.StringIO())
    clearings("rtx-4090", [50 + (hour % 5) * 6 for hour in range(24)])
    page = browser_page

    page.goto(f"{live_server.url}/pricing/")

    expect(page.get_by_test_id("spot-chart")).to_have_attribute("data-drawn", "true")
    assert y_axis(page)["marked"] == 0
    expect(page.get_by_test_id("spot-chart-note")).to_be_hidden()

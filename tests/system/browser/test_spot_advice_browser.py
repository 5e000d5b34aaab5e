"""Spot without surprises, in a real browser at a desktop and a phone width.

The launch quote says per line whether chips run spot or on-demand and at what price, and why some
run on-demand; the bid field shows the prices now and the bid's advice; a bid above on-demand is
flagged as it is typed; and cancelling a bid that would move a running job asks first.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from fleet.choices import AgentStatus, AllocationMode
from fleet.models import Allocation, ChipType, Node
from market.models import Bid, BidStatus
from tests.system.browser.test_spot_pages_browser import log_in, price_history, running_job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"desktop": (1366, 900), "phone": (390, 844)}


@pytest.fixture(autouse=True)
def market_clears_inline(monkeypatch):
    from market.tasks import clear_market

    monkeypatch.setattr("market.tasks.clear_market.delay", lambda chip_type_id=None: clear_market(chip_type_id))
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)


def one_spot_rtx_4090() -> Node:
    """The seeded fleet, online, with a single spot-eligible RTX 4090 chip: the spot market is short."""
    call_command("seed_catalog", stdout=io.StringIO())
    Node.objects.update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())
    spot = Node.objects.filter(pool__chip_type__slug="rtx-4090", spot_eligible=True).first()
    Node.objects.filter(pk=spot.pk).update(chips=1)
    return Node.objects.get(pk=spot.pk)


def no_horizontal_overflow(page: Page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth")


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_spot_quote_bid_advice_warning_and_confirmed_cancel(
    live_server, alice, fund, chromium: Browser, screenshots, viewport
):
    width, height = VIEWPORTS[viewport]
    spot_node = one_spot_rtx_4090()
    fund(alice)
    price_history()
    context = chromium.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(45_000)  # a quote plans on the whole seeded fleet
    try:
        log_in(page, live_server.url)

        # The launch quote: 3 RTX 4090 picked by hand, spot at 0.90 with only 1 spot chip free.
        page.goto(f"{live_server.url}/train/")
        page.get_by_test_id("quote-chips").wait_for()
        page.locator("details.hand-pick summary").click()
        page.locator("input[name=chips_rtx-4090]").fill("3")
        page.locator("input[name=spot]").check()
        page.get_by_label("Spot bid (¥ per chip-hour)").fill("0.90")
        note = page.get_by_test_id("quote-on-demand-note")
        expect(note).to_have_text(
            "2 of 3 chips run on-demand: the spot market has only 1 NVIDIA RTX 4090 chip under your bid."
        )
        spot_line = page.locator('[data-testid=quote-line][data-mode="spot"]')
        expect(spot_line.get_by_test_id("quote-line-price")).to_have_text("1 × ¥0.64/chip-h = ¥0.64/h")
        on_demand_line = page.locator('[data-testid=quote-line][data-mode="on-demand"]')
        expect(on_demand_line.get_by_test_id("quote-line-price")).to_have_text("2 × ¥1.20/chip-h = ¥2.40/h")
        hint = page.get_by_test_id("bid-hint")
        expect(hint.locator('[data-chip="rtx-4090"]')).to_contain_text("spot now ¥0.64 · floor ¥0.50 · on-demand ¥1.20")
        expect(hint.get_by_test_id("bid-advice").first).to_contain_text("uninterrupted on average")
        assert no_horizontal_overflow(page)
        page.screenshot(path=str(screenshots / f"spot-advice-1-quote-{viewport}.png"), full_page=True)

        # A running job on the spot chip, under a 1-chip bid; the bids page hints and warns as you type.
        job = running_job(alice, name="spot run", spot=True, spot_bid_per_hour=900_000)
        rtx = ChipType.objects.get(slug="rtx-4090")
        now = timezone.now()
        Allocation.objects.create(
            job=job, node=spot_node, chip_type=rtx, chips=1, mode=AllocationMode.SPOT, epoch=1, started_at=now,
            billed_through=now,
        )  # fmt: skip
        bid = Bid.objects.create(
            owner=alice, job=job, chip_type=rtx, chips=1, max_price_per_hour=900_000, placed_at=now, won_chips=1
        )
        page.goto(f"{live_server.url}/bids/")
        form = page.get_by_test_id("bid-form")
        form.get_by_label("Chip", exact=True).select_option("rtx-4090")
        form.get_by_label("Max price (¥ per chip-hour)").fill("0.80")
        form_hint = form.get_by_test_id("bid-hint")
        expect(form_hint.get_by_test_id("bid-advice")).to_contain_text("At ¥0.80:")
        expect(form_hint).to_contain_text("on-demand ¥1.20")
        form.get_by_label("Max price (¥ per chip-hour)").fill("2.00")
        expect(form_hint.get_by_test_id("bid-warning")).to_contain_text("above the NVIDIA RTX 4090 on-demand price")
        expect(page.get_by_test_id("advice-chart")).to_have_attribute("data-drawn", "true")
        assert no_horizontal_overflow(page)
        page.screenshot(path=str(screenshots / f"spot-advice-2-bids-{viewport}.png"), full_page=True)

        # Cancelling the bid would move the running job: the page says so and waits.
        page.locator(f'tr[data-bid="{bid.pk}"]').get_by_test_id("bid-cancel").click()
        confirm = page.get_by_test_id("bid-confirm")
        expect(confirm.get_by_test_id("bid-confirm-message")).to_contain_text(
            f"Cancelling bid {bid.pk} moves job {job.pk}"
        )
        expect(confirm.get_by_test_id("bid-confirm-message")).to_contain_text("loses all 1 of its NVIDIA RTX 4090")
        assert Bid.objects.get(pk=bid.pk).status == BidStatus.ACTIVE
        assert no_horizontal_overflow(page)
        page.screenshot(path=str(screenshots / f"spot-advice-3-confirm-{viewport}.png"), full_page=True)
        confirm.get_by_test_id("bid-confirm-yes").click()
        expect(page.locator(f'tr[data-bid="{bid.pk}"]').get_by_test_id("bid-status")).to_have_text("Cancelled")
    finally:
        context.close()

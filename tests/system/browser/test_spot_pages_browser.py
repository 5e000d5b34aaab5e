"""The spot pages in a real browser: a bid placed and listed beside the price chart; a migration and its refund."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.models import SpotPrice
from fleet.choices import AgentStatus, JobStatus, MigrationReason, MigrationStatus
from fleet.models import ChipType, Job, Node
from market.models import Bid, BidStatus
from tests.support.accounts import PASSWORD
from workers.models import JobMigration

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def market_clears_inline(monkeypatch):
    """A bid change clears its market at once, in the live server's thread, instead of through Celery."""
    from market.tasks import clear_market

    monkeypatch.setattr("market.tasks.clear_market.delay", lambda chip_type_id=None: clear_market(chip_type_id))
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)


def running_job(owner, status=JobStatus.RUNNING, **fields) -> Job:
    spec = {"model_name": "llama-tiny", "per_device_batch_size": 4, "max_steps": 200, "max_budget_per_hour": 28_000_000}
    return Job.objects.create(owner=owner, status=status, **{**spec, **fields})


def price_history() -> None:
    """A few hours of clearings for two chip types, as the auction would have recorded them."""
    now = timezone.now()
    for slug, path in {"rtx-4090": [50, 50, 72, 95, 80, 64], "ascend-910b": [60, 60, 60, 85, 110, 70]}.items():
        chip = ChipType.objects.get(slug=slug)
        for index, cents in enumerate(path):
            SpotPrice.objects.create(
                chip_type=chip,
                at=now - timedelta(hours=5) + timedelta(minutes=50 * index),
                price_per_hour=cents * 10_000,
                floor_per_hour=chip.prices.order_by("-effective_at").first().spot_floor_per_hour,
                capacity=8,
                demand=4 + index,
                allocated=min(8, 4 + index),
            )


def log_in(page: Page, url: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.locator("main button[type=submit]").click()
    expect(page).to_have_url(f"{url}/dashboard/")


def chart_has_ink(page: Page, selector: str) -> bool:
    """Whether the canvas has any painted pixel (Chart.js drew on it)."""
    return page.eval_on_selector(
        selector,
        "c => c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v, i) => i % 4 === 3 && v > 0)",
    )


def test_a_bid_placed_in_the_browser_is_listed_and_a_migration_shows_its_refund(
    live_server, alice, fund, browser_page, tmp_path
):
    call_command("seed_catalog", stdout=io.StringIO())
    Node.objects.update(agent_status=AgentStatus.ONLINE, last_heartbeat_at=timezone.now())
    fund(alice)
    price_history()
    # A spot job waiting for chips: its bid is demand (a running job's counts only for chips it holds).
    job = running_job(alice, status=JobStatus.QUEUED, name="spot run", spot=True, spot_bid_per_hour=900_000)
    page = browser_page
    log_in(page, live_server.url)

    page.get_by_role("link", name="Bids").click()
    expect(page).to_have_url(f"{live_server.url}/bids/")
    form = page.get_by_test_id("bid-form")
    form.get_by_label("Job", exact=True).select_option(str(job.pk))
    form.get_by_label("Chip", exact=True).select_option("rtx-4090")
    form.get_by_label("Chips", exact=True).fill("2")
    form.get_by_label("Max price (¥ per chip-hour)").fill("0.90")
    form.get_by_role("button", name="Place bid").click()

    bid = Bid.objects.get(owner=alice)
    row = page.locator(f'tr[data-bid="{bid.pk}"]')
    expect(row.get_by_test_id("bid-status")).to_have_text("Active")
    expect(row.get_by_test_id("bid-max-price")).to_have_text("¥0.90")
    expect(row.get_by_test_id("bid-won")).to_have_text("2 of 2")  # the market cleared on the bid: capacity for it
    expect(page.get_by_test_id("spot-chart")).to_have_attribute("data-drawn", "true")
    assert chart_has_ink(page, "#spot-price-chart")
    page.screenshot(path=str(tmp_path / "spot-1-bids.png"), full_page=True)

    # A refused change names its field and changes nothing.
    row.locator("input[name=max_price]").fill("0.10")
    row.get_by_role("button", name="Update").click()
    expect(page.get_by_test_id("bid-errors")).to_contain_text("below the rtx-4090 spot floor of 0.50/h")
    bid.refresh_from_db()
    assert (bid.status, bid.max_price_per_hour) == (BidStatus.ACTIVE, 900_000)
    expect(page.get_by_test_id("spot-chart")).to_have_attribute("data-drawn", "true")
    page.screenshot(path=str(tmp_path / "spot-2-bid-refused.png"), full_page=True)

    notice = timezone.now() - timedelta(minutes=4)
    JobMigration.objects.create(
        job=job,
        reason=MigrationReason.OUTBID,
        detail="higher bids took 2 of its rtx-4090 chip(s): the spot price cleared at 1.10/h; its bid is 0.90/h",
        status=MigrationStatus.RESUMED,
        from_epoch=1,
        to_epoch=2,
        nodes=["rtx-4090-cn-east-1-2"],
        notice_at=notice,
        notice_seconds=30,
        step_at_notice=57,
        checkpoint_step=57,
        checkpoint_at=notice + timedelta(seconds=1.4),
        replanned_at=notice + timedelta(seconds=3),
        resumed_at=notice + timedelta(seconds=7.2),
        resume_step=58,
        steps_lost=0,
        lost_seconds=0.0,
        refund=4_210,
    )
    page.get_by_role("link", name=f"Job {job.pk}").first.click()
    migrations = page.get_by_test_id("migrations")
    expect(migrations).to_be_visible()
    expect(migrations.get_by_test_id("migration-reason")).to_contain_text("Outbid on the spot market")
    refund = migrations.get_by_test_id("migration-refund")
    expect(refund).to_have_text("<¥0.01")  # to the cent on the page, the exact amount on hover
    expect(refund.locator(".money")).to_have_attribute("title", "¥0.00421")
    expect(migrations.get_by_test_id("migration-downtime")).to_have_text("7.2 s")
    page.screenshot(path=str(tmp_path / "spot-3-job-migrations.png"), full_page=True)

    page.goto(f"{live_server.url}/pricing/")
    expect(page.get_by_test_id("spot-chart")).to_have_attribute("data-drawn", "true")
    expect(page.locator('tr[data-chip="rtx-4090"]').get_by_test_id("spot-floor")).to_have_text("¥0.50")
    page.screenshot(path=str(tmp_path / "spot-4-pricing.png"), full_page=True)

    # Ticking Spot shows the bid and its fallbacks, and the live quote turns to spot chips.
    page.goto(f"{live_server.url}/train/")
    page.get_by_test_id("quote-chips").wait_for()
    assert "Spot" not in page.get_by_test_id("quote-chips").inner_text()
    page.locator("input[name=spot]").check()
    page.get_by_label("Spot bid (¥ per chip-hour)").fill("5")
    expect(page.get_by_test_id("quote-chips")).to_contain_text(re.compile("Spot"))
    page.screenshot(path=str(tmp_path / "spot-5-launch.png"), full_page=True)
    page.locator("input[name=spot]").uncheck()
    expect(page.get_by_test_id("quote-chips")).not_to_contain_text("Spot")

"""In a real browser, no page trips its Content-Security-Policy: charts draw, htmx swaps, nothing is refused."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.models import SpotPrice
from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from tests.support.accounts import PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PAGES = ["/", "/pricing/", "/dashboard/", "/dashboard/tokens/", "/train/", "/jobs/", "/bids/", "/billing/usage/"]


def spot_history() -> None:
    now = timezone.now()
    chip = ChipType.objects.get(slug="rtx-4090")
    for index, cents in enumerate([50, 72, 95, 64]):
        SpotPrice.objects.create(
            chip_type=chip, at=now - timedelta(hours=3 - index), price_per_hour=cents * 10_000,
            floor_per_hour=500_000, capacity=8, demand=4, allocated=4,
        )  # fmt: skip


def refusals(page: Page) -> list[str]:
    """Console messages of the Content-Security-Policy refusing something, collected from now on."""
    seen: list[str] = []
    page.on("console", lambda message: seen.append(message.text) if "Content Security Policy" in message.text else None)
    return seen


def test_the_pages_run_under_their_policy_with_nothing_refused(live_server, alice, browser_page):
    call_command("seed_catalog", stdout=StringIO())
    spot_history()
    page, url = browser_page, live_server.url
    refused = refusals(page)
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.locator("main button[type=submit]").click()
    expect(page).to_have_url(f"{url}/dashboard/")

    job = Job.objects.create(
        owner=alice, name="charted", model_name="llama-tiny", per_device_batch_size=4, max_steps=100,
        max_budget_per_hour=28_000_000, status=JobStatus.RUNNING,
    )  # fmt: skip

    for path in [*PAGES, f"/jobs/{job.pk}/"]:
        page.goto(url + path)
        page.wait_for_load_state("networkidle")
    page.goto(f"{url}/train/")
    page.fill("input[name=max_steps]", "150")  # htmx asks for a new quote and swaps it in
    with page.expect_response(lambda response: "/train/quote/" in response.url):
        page.get_by_test_id("spot-box").locator("input[name=spot]").check()  # re-quotes through "requote"
    page.wait_for_load_state("networkidle")

    assert refused == []

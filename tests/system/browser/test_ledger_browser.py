"""The grouped ledger in a real browser: one row for an hour of meter ticks, opened to its charges; money on hover."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from tests.support.accounts import PASSWORD
from tests.support.statements import charge, fund, make_allocation, make_job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def log_in(page: Page, url: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.locator("main button[type=submit]").click()
    expect(page).to_have_url(f"{url}/dashboard/")


def test_an_hour_of_ticks_is_one_row_that_opens_to_its_charges(live_server, alice, browser_page, screenshots):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice, "100", "2026-03-10 09:00")
    allocation = make_allocation(make_job(alice, "alpha"), "rtx-4090", 2, "2026-03-10 10:00")
    for n in range(11):  # 5-second ticks from 10:00:00 to 10:00:55
        charge(allocation, f"2026-03-10 10:00:{5 * n:02d}", f"2026-03-10 10:00:{5 * n + 5:02d}", "0.012345")
    page = browser_page
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/billing/")
    groups = page.get_by_test_id("ledger-group")
    expect(groups).to_have_count(1)
    amount = groups.get_by_test_id("ledger-amount").locator(".money")
    expect(amount).to_have_text("−¥0.14")
    expect(amount).to_have_attribute("title", "−¥0.135795")
    expect(page.get_by_test_id("ledger-charge")).to_have_count(0)  # fetched only when opened
    groups.locator("summary").click()
    expect(page.get_by_test_id("ledger-charge")).to_have_count(11)
    page.screenshot(path=str(screenshots / "ledger-grouped.png"), full_page=True)

"""A new user's first minutes in a real browser: sign up, confirm the e-mail, credit, prices, a token, the API,
revoke."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from fleet.models import ChipType

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

USERNAME = "ada"
PASSWORD = "Analytical-Engine-1843"
PRICE = re.compile(r"^¥\d+\.\d{2,6}$")


def sign_up(page: Page, base_url: str) -> None:
    page.goto(f"{base_url}/accounts/signup/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_email", "ada@example.com")
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.locator("main form button[type=submit]").click()


def confirm_email(page: Page, base_url: str, outbox: list) -> None:
    """Sign-up asks to confirm the address first; follow the mailed link and confirm, as the user would."""
    expect(page).to_have_url(f"{base_url}/accounts/confirm-email/")
    (mail,) = outbox
    link = re.search(r"https?://\S+/accounts/confirm-email/\S+/", mail.body)[0]
    page.goto(base_url + "/accounts/" + link.split("/accounts/", 1)[1])
    page.locator("main form button[type=submit]").click()


def create_token(page: Page, base_url: str) -> str:
    page.goto(f"{base_url}/dashboard/tokens/")
    page.fill("#id_name", "e2e")
    page.select_option("#id_scope", "read_write")
    page.fill("#id_expires_in_days", "30")
    page.get_by_role("button", name="Create token").click()
    return page.get_by_test_id("new-token").inner_text().strip()


def get_account(base_url: str, token: str) -> dict:
    # urllib, not page.request: the browser's session cookie must not be what authenticates.
    request = urllib.request.Request(f"{base_url}/api/v1/account/", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def revoke_in_browser(page: Page) -> None:
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke").click()
    expect(page.get_by_test_id("token-status")).to_have_text("revoked")


def test_a_new_user_signs_up_and_calls_the_api_with_a_token(live_server, browser_page, screenshots, mailoutbox):
    call_command("seed_catalog", stdout=StringIO())
    page, url = browser_page, live_server.url

    sign_up(page, url)
    confirm_email(page, url, mailoutbox)
    expect(page).to_have_url(f"{url}/dashboard/")
    expect(page.get_by_test_id("balance")).to_have_text("¥10.00")
    page.screenshot(path=screenshots / "dashboard.png", full_page=True)

    page.get_by_role("link", name="Pricing").click()
    rows = page.locator("tr[data-chip]")
    expect(rows).to_have_count(ChipType.objects.count())
    assert ChipType.objects.count() == 7
    for chip in ChipType.objects.all():
        row = page.locator(f'tr[data-chip="{chip.slug}"]')
        expect(row.locator("th")).to_have_text(chip.name)
        expect(row.get_by_test_id("on-demand")).to_have_text(PRICE)
        expect(row.get_by_test_id("on-demand-per-unit")).to_have_text(PRICE)
    page.screenshot(path=screenshots / "pricing.png", full_page=True)

    token = create_token(page, url)
    assert token.startswith("sv_")
    expect(page.get_by_test_id("token-status")).to_have_text("active")
    page.screenshot(path=screenshots / "tokens.png", full_page=True)

    account = get_account(url, token)
    assert {key: account[key] for key in ("username", "balance", "currency")} == {
        "username": USERNAME,
        "balance": "10.00",
        "currency": "CNY",
    }

    revoke_in_browser(page)
    with pytest.raises(urllib.error.HTTPError) as refused:
        get_account(url, token)
    assert refused.value.code == 401

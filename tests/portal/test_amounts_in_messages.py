"""Amounts people read are to the cent: the messages of billing, launch, the market and the planner, the quote box
and the pricing page's work-unit columns ("¥0.04", "<¥0.01" for a real but tiny amount, never "¥0.041667").
Prices per chip-hour keep their digits (test_money_display.py); the API and CSV keep full precision."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from billing.choices import AccountKind, TransactionKind
from billing.models import OperatorSettings
from billing.services.holds import HoldRefused, check_hold
from billing.services.ledger import InsufficientFunds, platform_account, transfer, wallet_for
from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from market.services.bids import BidRefused, place_bid
from tests.support.accounts import token_client
from tests.support.portal_pages import bring_online, quote_html

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_scheduling", "own_store")]

# More digits than a cent anywhere in an amount with the currency symbol.
SUB_CENT = re.compile(r"¥[\d,]*\.\d{3,}")


def test_an_overdraft_names_the_balance_and_the_need_to_the_cent(alice, fund):
    fund(alice, "0.123456")
    with pytest.raises(InsufficientFunds) as refused:
        transfer(
            key="too-much", kind=TransactionKind.CHARGE, source=wallet_for(alice),
            destination=platform_account(AccountKind.REVENUE), amount=1_234_567,
        )  # fmt: skip
    assert "the balance is ¥0.12, this needs ¥1.24" in str(refused.value)  # what is needed, rounded up


def test_a_hold_refusal_gives_amounts_to_the_cent(alice, fund):
    fund(alice, "0.012345")
    with pytest.raises(HoldRefused) as refused:
        check_hold(alice, 1_234_567, committed=4_321)
    message = str(refused.value)
    assert "Your balance is ¥0.01" in message and "(¥1.23/h)" in message and "<¥0.01 held" in message
    assert not SUB_CENT.search(message), message


def test_a_total_budget_refused_at_launch_names_amounts_to_the_cent(alice, fund, catalog):
    fund(alice, "100")
    bring_online("ascend-910b")
    OperatorSettings.objects.update_or_create(pk=1, defaults={"stop_margin_minutes": 3})  # of ¥1.50/h: ¥0.075
    spec = {"model": "llama-tiny", "per_device_batch_size": 4, "max_steps": 100, "max_budget": "28"}
    spec.update(chip_counts={"ascend-910b": 1}, total_budget="0.01")

    response = token_client(alice).post("/api/v1/jobs/", spec, format="json")

    assert response.status_code == 400, response.json()
    message = response.json()["errors"]["total_budget"][0]
    assert "of this plan's spend (¥0.08 at ¥1.50/h)" in message and not SUB_CENT.search(message), message


def test_a_budget_below_the_cheapest_plan_is_named_to_the_cent(alice, catalog):
    bring_online("rtx-4090")
    spec = {"model": "llama-tiny", "per_device_batch_size": 4, "max_steps": 100, "max_budget": "0.123456"}

    response = token_client(alice).post("/api/v1/quotes/", spec, format="json")

    assert response.status_code == 400
    assert "The hourly budget ¥0.12/h is below" in response.json()["errors"]["max_budget"][0]


def test_a_bid_the_balance_cannot_hold_names_amounts_to_the_cent(alice, fund, enroll):  # noqa: F811
    fund(alice, "0.012345")
    enroll("spot-4090", "rtx-4090", chips=1, spot=True)
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000,
        spot=True, spot_bid_per_hour=1_000_000, status=JobStatus.QUEUED,
    )  # fmt: skip

    rtx = ChipType.objects.get(slug="rtx-4090")
    with pytest.raises(BidRefused) as refused:
        place_bid(alice, job=job, chip_type=rtx, chips=1, max_price_per_hour=1_230_000)

    message = str(refused.value)
    assert message.startswith("Your balance of ¥0.01 can't hold this bid") and not SUB_CENT.search(message), message


def test_the_quote_box_shows_cents(client, alice, fund, catalog):
    fund(alice, "100")
    bring_online()
    client.force_login(alice)

    html = quote_html(client)

    for name in ("quote-price", "quote-per-million", "quote-total"):
        shown = re.search(rf'data-testid="{name}">([^<]*)<', html)[1]
        assert re.fullmatch(r"(¥[\d,]+\.\d\d|&lt;¥0\.01)", shown), (name, shown)


def test_the_pricing_pages_work_unit_columns_show_cents(client, catalog):
    html = client.get(reverse("pricing")).content.decode()

    cells = re.findall(r'data-testid="(?:on-demand|spot)-per-unit">([^<]*)<', html)
    assert cells and all(re.fullmatch(r"¥[\d,]+\.\d\d|—", cell) for cell in cells), cells

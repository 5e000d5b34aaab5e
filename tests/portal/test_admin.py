"""The operator console: prices with history, credit adjustments with reasons, settings."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.contrib.messages import get_messages
from django.utils import timezone

from billing.choices import TransactionKind
from billing.models import OperatorSettings, Price, Transaction
from billing.services.credits import adjust_credit, grant_trial_credit
from billing.services.ledger import balance_of
from fleet.models import ChipType
from tests.support.money_html import money

pytestmark = pytest.mark.django_db


@pytest.fixture
def console(client, operator):
    client.force_login(operator)
    return client


def add_price(console, chip, on_demand, spot_floor):
    effective = timezone.localtime(timezone=ZoneInfo(settings.DISPLAY_TIME_ZONE)) + timedelta(hours=1)
    return console.post(
        "/admin/billing/price/add/",
        {
            "chip_type": chip.pk,
            "on_demand": on_demand,
            "spot_floor": spot_floor,
            "effective_at_0": effective.strftime("%Y-%m-%d"),
            "effective_at_1": effective.strftime("%H:%M:%S"),
            "note": "test",
        },
    )


def test_only_operators_can_open_the_console(client, alice):
    client.force_login(alice)
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_a_new_price_is_a_new_row_with_its_author(console, operator, catalog):
    chip = ChipType.objects.get(slug="rtx-4090")
    response = add_price(console, chip, "1.35", "0.55")
    assert response.status_code == 302
    newest = chip.prices.order_by("-effective_at", "-id").first()
    assert (newest.on_demand_per_hour, newest.spot_floor_per_hour) == (1_350_000, 550_000)
    assert newest.author == operator
    assert chip.prices.count() == 2
    assert chip.prices.filter(on_demand_per_hour=1_200_000).exists()


@pytest.mark.parametrize(
    ("on_demand", "spot_floor", "field", "message"),
    [
        ("-1", "0.5", "on_demand", b"greater than or equal to"),
        ("abc", "0.5", "on_demand", b"Enter a number"),
        ("1.0", "2.0", "spot_floor", b"cannot be above the on-demand price"),
        ("0", "0", "on_demand", b"greater than or equal to"),
    ],
)
def test_a_bad_price_is_refused_with_a_message_and_nothing_saved(
    console, catalog, on_demand, spot_floor, field, message
):
    chip = ChipType.objects.get(slug="rtx-4090")
    response = add_price(console, chip, on_demand, spot_floor)
    assert response.status_code == 200
    assert message in response.content
    assert chip.prices.count() == 1


def test_past_prices_cannot_be_edited_or_deleted_in_the_console(console, catalog):
    price = Price.objects.first()
    response = console.post(f"/admin/billing/price/{price.pk}/change/", {"on_demand": "9", "spot_floor": "1"})
    assert response.status_code == 403
    assert console.post(f"/admin/billing/price/{price.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Price.objects.get(pk=price.pk).on_demand_per_hour == price.on_demand_per_hour


def adjust(console, user, amount, reason, key="adjust:test"):
    return console.post(
        f"/admin/auth/user/{user.pk}/adjust-credit/",
        {"amount": amount, "reason": reason, "idempotency_key": key},
    )


def test_an_operator_credits_a_wallet_with_a_reason(console, operator, alice):
    response = adjust(console, alice, "5.50", "Compensation for an outage")
    assert response.status_code == 302
    assert balance_of(alice) == 5_500_000
    txn = Transaction.objects.get(kind=TransactionKind.ADJUSTMENT)
    assert txn.memo == "Compensation for an outage"
    assert txn.created_by == operator


def test_submitting_the_same_adjustment_form_twice_posts_once(console, alice):
    adjust(console, alice, "5", "goodwill", key="adjust:same-form")
    adjust(console, alice, "5", "goodwill", key="adjust:same-form")
    assert balance_of(alice) == 5_000_000


def test_an_adjustment_without_a_reason_is_refused(console, alice):
    response = adjust(console, alice, "5", "   ")
    assert response.status_code == 200
    assert b"This field is required" in response.content or b"Say why" in response.content
    assert balance_of(alice) == 0
    assert not Transaction.objects.exists()


def test_a_debit_that_would_make_the_wallet_negative_is_refused(console, alice):
    grant_trial_credit(alice)
    response = adjust(console, alice, "-10.01", "clawback")
    assert response.status_code == 200
    assert b"Insufficient credit" in response.content
    assert balance_of(alice) == 10_000_000


def test_the_user_list_shows_balances(console, alice):
    grant_trial_credit(alice)
    response = console.get("/admin/auth/user/")
    assert b"10.00" in response.content
    assert b"Adjust credit" in response.content


def test_the_operator_sets_the_trial_credit(console):
    OperatorSettings.load()
    response = console.post(
        "/admin/billing/operatorsettings/1/change/", {"trial_credit_amount": "12.5", "telemetry_retention_days": "90"}
    )
    assert response.status_code == 302
    assert OperatorSettings.load().trial_credit == 12_500_000


def test_a_negative_trial_credit_setting_is_refused(console):
    OperatorSettings.load()
    response = console.post("/admin/billing/operatorsettings/1/change/", {"trial_credit_amount": "-1"})
    assert response.status_code == 200
    assert OperatorSettings.load().trial_credit == 10_000_000


def test_ledger_transactions_are_read_only_in_the_console(console, alice):
    txn = grant_trial_credit(alice)
    assert console.post(f"/admin/billing/transaction/{txn.pk}/delete/", {"post": "yes"}).status_code == 403
    assert console.get("/admin/billing/transaction/add/").status_code == 403
    assert Transaction.objects.filter(pk=txn.pk).exists()


def test_the_console_reverses_a_transaction_as_a_correction(console, alice):
    txn = grant_trial_credit(alice)
    console.post("/admin/billing/transaction/", {"action": "reverse_selected", "_selected_action": [txn.pk]})
    assert balance_of(alice) == 0
    assert Transaction.objects.filter(reverses=txn).exists()


def test_a_new_prices_message_names_its_chip_and_amounts_not_an_id(console, catalog):
    chip = ChipType.objects.get(slug="rtx-4090")

    response = add_price(console, chip, "1.35", "0.55")

    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert message.startswith("The price “NVIDIA RTX 4090: ¥1.35/chip-h, spot floor ¥0.55, from 20")
    assert f"“{chip.pk} from" not in message


def test_the_user_page_links_to_that_users_ledger_with_amounts(console, alice, bob):
    grant_trial_credit(alice)
    adjust_credit(alice, -2_500_000, reason="clawback", actor=None, key="alice-clawback")
    adjust_credit(bob, 3_000_000, reason="bob's goodwill", actor=None, key="bob-goodwill")

    page = console.get(f"/admin/auth/user/{alice.pk}/change/").content.decode()
    link = f"/admin/billing/transaction/?owner={alice.pk}"
    assert f'href="{link}"' in page

    ledger = console.get(link).content.decode()

    assert "clawback" in ledger and "bob&#x27;s goodwill" not in ledger and "bob's goodwill" not in ledger
    assert money("+¥10.00") in ledger and money("−¥2.50") in ledger  # what each did to alice's wallet


def test_the_transaction_list_shows_each_transactions_amount(console, alice):
    adjust_credit(alice, 9_880_288, reason="odd amount", actor=None, key="odd")

    listing = console.get("/admin/billing/transaction/").content.decode()

    assert money("¥9.88", "¥9.880288") in listing


def test_a_bad_owner_in_the_ledger_link_shows_every_transaction_not_an_error(console, alice):
    grant_trial_credit(alice)
    assert console.get("/admin/billing/transaction/?owner=abc").status_code in (200, 302)


def test_searching_the_transactions_by_user_keeps_each_amount_whole(console, alice):
    adjust_credit(alice, 9_880_288, reason="odd amount", actor=None, key="odd")

    listing = console.get("/admin/billing/transaction/", {"q": "alice"}).content.decode()

    assert money("¥9.88", "¥9.880288") in listing and "¥19.76" not in listing

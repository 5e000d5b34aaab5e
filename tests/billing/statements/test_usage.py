"""Usage per job, chip type and day: the service, the page and the CSV exports."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from billing.models import Charge
from billing.services.statements import StatementError, charges_for, parse_period, total_of, usage_rows
from kernel.money import to_micros
from tests.support.money_html import money
from tests.support.statements import seed_march

pytestmark = pytest.mark.django_db

MARCH = {"since": "2026-03-01", "until": "2026-03-31"}


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


@pytest.fixture
def as_alice(client, alice):
    client.force_login(alice)
    return client


def read_csv(response) -> list[dict]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


@pytest.mark.parametrize("group", ["job", "chip", "day"])
def test_every_grouping_sums_to_the_charged_total(march, alice, group):
    charges = charges_for(alice, parse_period("2026-03-01", "2026-03-31"))
    charged = sum(charge.amount for charge in charges)
    assert charged == to_micros("7.05")
    assert total_of(usage_rows(charges, group)) == charged


def test_usage_per_day_counts_a_charge_on_the_day_it_ended(march, alice):
    rows = usage_rows(charges_for(alice, parse_period("2026-03-01", "2026-03-31")), "day")
    assert [(row.key, row.amount) for row in rows] == [
        ("2026-03-10", to_micros("2.40")),
        ("2026-03-11", to_micros("4.65")),
    ]


def test_usage_per_job_and_chip_has_chip_hours(march, alice):
    charges = charges_for(alice, parse_period("2026-03-01", "2026-03-31"))
    by_job = {row.label: (row.chip_hours, row.amount) for row in usage_rows(charges, "job")}
    assert by_job == {
        f"Job {march['alpha'].pk} · alpha": (Decimal("4.000"), to_micros("4.80")),
        f"Job {march['beta'].pk} · beta": (Decimal("0.500"), to_micros("2.25")),
    }
    by_chip = {row.key: row.amount for row in usage_rows(charges, "chip")}
    assert by_chip == {"rtx-4090": to_micros("4.80"), "a100-80g": to_micros("2.25")}


@pytest.mark.parametrize(
    ("since", "until", "message"),
    [
        ("2026-03-31", "2026-03-01", "after the end date"),
        ("yesterday", "", "not a date"),
        ("", "2026-02-30", "not a date"),
        ("", "9999-12-31", "out of range"),
    ],
)
def test_a_bad_period_is_refused_with_a_message(since, until, message):
    with pytest.raises(StatementError, match=message):
        parse_period(since, until)


def test_the_usage_page_shows_the_users_usage_and_never_another_users(march, as_alice):
    response = as_alice.get("/billing/usage/", MARCH)
    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-testid="usage-total">{money("¥7.05")}<' in page
    assert "alpha" in page and "rtx-4090" not in page  # chip rows show the chip's name
    assert "NVIDIA RTX 4090" in page and "2026-03-11" in page
    assert "bobs-secret-run" not in page
    assert "NVIDIA H100 80G" not in page
    assert "9.80" not in page


def test_the_usage_page_refuses_since_after_until_with_a_message(march, as_alice):
    response = as_alice.get("/billing/usage/", {"since": "2026-03-31", "until": "2026-03-01"})
    assert response.status_code == 400
    assert "is after the end date" in response.content.decode()


def test_the_usage_page_needs_a_login(client):
    response = client.get("/billing/usage/")
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_the_usage_csv_parses_back_to_the_users_charges(march, as_alice, alice):
    response = as_alice.get("/billing/usage.csv", MARCH)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="starverse-usage-2026-03-01-to-2026-03-31.csv"' in response["Content-Disposition"]
    rows = read_csv(response)
    assert len(rows) == 3
    assert sum(Decimal(row["amount"]) for row in rows) == Decimal("7.05")
    assert {int(row["charge"]) for row in rows} == set(
        Charge.objects.filter(owner=alice, ended_at__month=3).values_list("pk", flat=True)
    )
    assert {row["job_name"] for row in rows} == {"alpha", "beta"}
    assert rows[0]["amount"] == "2.40" and rows[0]["chip_type"] == "rtx-4090" and rows[0]["seconds"] == "3600"


def test_the_ledger_csv_parses_back_with_a_running_balance(march, as_alice):
    response = as_alice.get("/billing/ledger.csv", MARCH)
    assert response.status_code == 200
    assert 'filename="starverse-ledger-2026-03-01-to-2026-03-31.csv"' in response["Content-Disposition"]
    rows = read_csv(response)
    assert [row["kind"] for row in rows] == ["topup", "charge", "charge", "charge", "refund"]
    assert sum(Decimal(row["amount"]) for row in rows) == Decimal("32.95")
    assert rows[0]["balance_after"] == "150.00"
    assert rows[-1]["balance_after"] == "132.95"
    assert all("bob" not in row["description"] for row in rows)


def test_the_ledger_csv_of_all_time_ends_at_the_balance(march, as_alice):
    rows = read_csv(as_alice.get("/billing/ledger.csv"))
    assert len(rows) == 7
    assert rows[-1]["balance_after"] == "132.55"


def test_another_users_csv_holds_none_of_alices_rows(march, client, bob):
    client.force_login(bob)
    usage = read_csv(client.get("/billing/usage.csv"))
    assert [(row["job_name"], row["amount"]) for row in usage] == [("bobs-secret-run", "9.80")]
    ledger = read_csv(client.get("/billing/ledger.csv"))
    assert [row["amount"] for row in ledger] == ["50.00", "-9.80"]


def test_a_csv_with_a_bad_date_is_a_400_with_a_message(march, as_alice):
    response = as_alice.get("/billing/ledger.csv", {"since": "2026-13-01"})
    assert response.status_code == 400
    assert b"is not a date" in response.content

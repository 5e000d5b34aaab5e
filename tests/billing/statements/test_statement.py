"""The monthly statement: opening balance + movements = closing balance, printable."""

from __future__ import annotations

import pytest

from billing.services.statements import StatementError, monthly_statement, parse_month, statement_months
from kernel.money import to_micros
from tests.support.money_html import money
from tests.support.statements import seed_march

pytestmark = pytest.mark.django_db


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


def test_opening_plus_movements_is_the_closing_balance(march, alice):
    report = monthly_statement(alice, "2026-03")
    assert report.opening == to_micros("100")
    assert {m.kind: m.amount for m in report.movements} == {
        "topup": to_micros("50"),
        "charge": -to_micros("7.05"),
        "refund": -to_micros("10"),
    }
    assert report.opening + report.net == report.closing == to_micros("132.95")


def test_the_next_month_opens_where_the_last_one_closed(march, alice):
    april = monthly_statement(alice, "2026-04")
    assert april.opening == to_micros("132.95")
    assert april.closing == to_micros("132.55")
    assert april.usage_total == to_micros("0.40")


def test_the_statement_lists_payments_refunds_and_usage(march, alice):
    report = monthly_statement(alice, "2026-03")
    assert [e.amount for e in report.payments] == [to_micros("50")]
    assert [e.amount for e in report.refunds] == [-to_micros("10")]
    assert report.usage_total == to_micros("7.05")
    assert [row.key for row in report.usage_by_chip] == ["rtx-4090", "a100-80g"]


def test_the_statement_page_shows_balances_and_only_the_users_usage(march, client, alice):
    client.force_login(alice)
    response = client.get("/billing/statements/2026-03/")
    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-testid="opening">{money("¥100.00")}<' in page
    assert f'data-testid="closing">{money("¥132.95")}<' in page
    assert money("+¥50.00") in page and money("−¥10.00") in page and money("−¥7.05") in page
    assert "alpha" in page and "NVIDIA A100 80G" in page
    assert "bobs-secret-run" not in page and "9.80" not in page
    assert 'class="site-header"' in page  # hidden by the print CSS, not by the page


def test_bobs_statement_never_shows_alices_money(march, client, bob):
    client.force_login(bob)
    page = client.get("/billing/statements/2026-03/").content.decode()
    assert f'data-testid="closing">{money("¥40.20")}<' in page
    assert "alpha" not in page and "132.95" not in page


@pytest.mark.parametrize("month", ["2026-13", "2026-00", "26-03", "march", "2026-3", "9999-12"])
def test_a_bad_month_is_a_400_with_a_message(client, alice, month):
    client.force_login(alice)
    response = client.get(f"/billing/statements/{month}/")
    assert response.status_code == 400
    assert "is not a month: use YYYY-MM" in response.content.decode()


def test_a_month_is_parsed_to_its_first_and_last_day():
    december = parse_month("2026-12")
    assert (str(december.since), str(december.until)) == ("2026-12-01", "2026-12-31")
    with pytest.raises(StatementError):
        parse_month("2026-13")


def test_the_statement_index_lists_months_back_to_the_first_entry(march, alice):
    months = statement_months(alice, now=parse_month("2026-05").start)
    assert months == ["2026-05", "2026-04", "2026-03", "2026-02"]

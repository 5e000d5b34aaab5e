"""Operator reports in the admin: revenue per chip and day, open allocations, payments and refunds."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import include, path

import billing.admin_reports  # noqa: F401  (installs the report URLs; billing/admin.py will import it)
from tests.support.money_html import money
from tests.support.statements import make_allocation, make_job, refund, seed_march

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.billing.statements.test_admin_reports")]

urlpatterns = [path("admin/", admin.site.urls), path("", include("portal.urls"))]

MARCH_10_11 = {"since": "2026-03-10", "until": "2026-03-11"}


@pytest.fixture
def march(catalog, alice, bob):
    return seed_march(alice, bob)


@pytest.fixture
def console(client, operator):
    client.force_login(operator)
    return client


def test_revenue_is_shown_per_chip_type_and_day(march, console):
    response = console.get("/admin/billing-reports/revenue/", MARCH_10_11)
    assert response.status_code == 200
    lines = {(str(line.day), line.chip): line.amount for line in response.context["lines"]}
    assert lines == {
        ("2026-03-10", "rtx-4090"): money("¥2.40"),
        ("2026-03-10", "h100-80g"): money("¥9.80"),
        ("2026-03-11", "rtx-4090"): money("¥2.40"),
        ("2026-03-11", "a100-80g"): money("¥2.25"),
    }
    assert f'data-testid="revenue-total">{money("¥16.85")}<' in response.content.decode()


def test_the_revenue_report_is_refused_to_non_staff(march, client, alice):
    client.force_login(alice)
    response = client.get("/admin/billing-reports/revenue/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "2026-03-11", "until": "2026-03-10"}, "is after the end date"),
        ({"until": "9999-12-31"}, "out of range"),
    ],
)
def test_a_bad_revenue_period_is_a_400_with_a_message(console, params, message):
    response = console.get("/admin/billing-reports/revenue/", params)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_open_allocations_show_their_spend_rate(catalog, console, alice):
    job = make_job(alice, "running")
    make_allocation(job, "a100-80g", 2, "2026-03-10 10:00")
    response = console.get("/admin/billing-reports/open/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "¥9.00/h" in page and "alice" in page
    assert 'data-testid="total-rate">¥9.00/h<' in page


def test_recent_payments_and_refunds_are_listed(march, console):
    refund(march["payment"], "5", "2026-03-21 12:00")
    page = console.get("/admin/billing-reports/payments/").content.decode()
    assert "pi_alice_1" in page and "¥50.00" in page
    assert page.count("Refund") >= 1 and "¥10.00" in page and "¥5.00" in page


def test_the_admin_index_links_the_reports(console):
    page = console.get("/admin/").content.decode()
    assert 'href="/admin/billing-reports/revenue/"' in page
    assert 'href="/admin/billing-reports/open/"' in page
    assert 'href="/admin/billing-reports/payments/"' in page

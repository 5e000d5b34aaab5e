"""Spend rate now and how long the balance lasts, on the dashboard."""

from __future__ import annotations

import pytest

from billing.services.statements import spend_rate
from kernel.money import to_micros
from tests.support.statements import fund, make_allocation, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(catalog, alice):
    """2 on-demand RTX 4090 (¥1.20/h each) and 4 spot TPU v4 (floor ¥1.20/h each): ¥7.20/h."""
    fund(alice, "72", "2026-03-01 00:00")
    job = make_job(alice, "running")
    make_allocation(job, "rtx-4090", 2, "2026-03-10 10:00")
    make_allocation(job, "tpu-v4", 4, "2026-03-10 10:00", mode="spot")
    make_allocation(job, "h100-80g", 8, "2026-03-09 10:00", ended="2026-03-09 11:00")  # ended: costs nothing now
    return job


def test_spend_rate_sums_chips_times_the_price_in_force(running, alice):
    rate = spend_rate(alice)
    assert rate.per_hour == to_micros("7.20")
    assert rate.lasts_seconds == 10 * 3600


def test_another_users_chips_are_not_in_the_rate(running, bob):
    assert spend_rate(bob).per_hour == 0
    assert spend_rate(bob).lasts_seconds is None


def test_the_dashboard_shows_the_rate_and_how_long_the_balance_lasts(running, client, alice):
    client.force_login(alice)
    page = client.get("/dashboard/").content.decode()
    assert 'data-testid="spend-rate">¥7.20/h<' in page
    assert 'data-testid="balance-lasts">about 10 h at this rate<' in page
    assert 'href="/billing/usage/"' in page and 'href="/billing/ledger.csv"' in page


def test_the_dashboard_shows_a_dash_when_nothing_runs(catalog, client, bob):
    client.force_login(bob)
    page = client.get("/dashboard/").content.decode()
    assert 'data-testid="spend-rate">—<' in page
    assert 'data-testid="balance-lasts">—<' in page

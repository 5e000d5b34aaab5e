"""The ledger for people: the meter's 5-second charges as one row per job and hour, other movements alone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from billing.choices import AccountKind, TransactionKind
from billing.services.ledger import platform_account, transfer, wallet_for
from billing.services.ledger_history import METER, LedgerHistory
from kernel.money import to_micros
from tests.support.money_html import money
from tests.support.statements import at, charge, fund, make_allocation, make_job, refund, top_up

pytestmark = pytest.mark.django_db


def ticks(allocation, start: str, count: int, amount: str) -> None:
    """`count` meter charges of 5 s each from `start`, each posted when it ended."""
    first = at(start)
    for n in range(count):
        begin, end = first + timedelta(seconds=5 * n), first + timedelta(seconds=5 * (n + 1))
        charge(allocation, f"{begin:%Y-%m-%d %H:%M:%S}", f"{end:%Y-%m-%d %H:%M:%S}", amount)


def rows_of(html: str, testid: str) -> int:
    return len(re.findall(f'data-testid="{testid}"', html))


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def hundred_ticks(catalog, alice):
    """Alice's ¥100, then 100 ticks of job alpha on 2 RTX 4090s between 10:00 and 10:08:20."""
    fund(alice, "100", "2026-03-10 09:00")
    alpha = make_job(alice, "alpha")
    ticks(make_allocation(alpha, "rtx-4090", 2, "2026-03-10 10:00"), "2026-03-10 10:00", 100, "0.012345")
    return alpha


def test_a_hundred_ticks_of_one_job_in_one_hour_are_one_row(hundred_ticks, alice, alice_client):
    response = alice_client.get(reverse("billing"))
    group, grant = response.context["ledger_rows"]
    assert (group.kind, group.job_id, group.hour) == (METER, hundred_ticks.pk, at("2026-03-10 10:00"))
    assert (group.ticks, group.chip_seconds, group.amount) == (100, 100 * 5 * 2, -to_micros("1.2345"))
    assert (grant.kind, grant.amount) == (TransactionKind.ADJUSTMENT, to_micros("100"))
    page = response.content.decode()
    assert rows_of(page, "ledger-group") == 1 and rows_of(page, "ledger-entry") == 1
    # The hour in the person's zone (Asia/Shanghai unless they chose another), with its offset.
    assert f"Job {hundred_ticks.pk} · alpha" in page and "2026-03-10 18:00–19:00 UTC+8" in re.sub(r"<[^>]+>", "", page)
    assert 'data-testid="ledger-ticks">100</span> charges' in page
    assert 'data-testid="ledger-chip-seconds">1,000<' in page
    assert money("−¥1.23", "−¥1.2345") in page  # to the cent, every micro-unit on hover
    assert "Chip-seconds" in page


def test_the_row_opens_to_its_hundred_charges(hundred_ticks, alice, alice_client):
    page = alice_client.get(reverse("billing")).content.decode()
    url = reverse("ledger_group", args=[hundred_ticks.pk, int(at("2026-03-10 10:00").timestamp())])
    assert f'hx-get="{url}"' in page and f'href="{url}"' in page  # fetched when opened; a link without JavaScript
    fragment = alice_client.get(url, headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.content.decode()
    assert rows_of(fragment.content.decode(), "ledger-charge") == 100
    assert [c.amount for c in fragment.context["charges"]] == [to_micros("0.012345")] * 100
    assert fragment.context["charges"][0].chip_seconds == 10
    full = alice_client.get(url).content.decode()
    assert rows_of(full, "ledger-charge") == 100 and money("¥1.23", "¥1.2345") in full


def test_the_dashboard_shows_the_same_grouped_ledger(hundred_ticks, alice_client):
    page = alice_client.get(reverse("dashboard")).content.decode()
    assert rows_of(page, "ledger-group") == 1 and rows_of(page, "ledger-entry") == 1


def test_other_hours_other_jobs_and_other_movements_are_rows_of_their_own(catalog, alice, alice_client):
    fund(alice, "100", "2026-03-10 09:00")
    payment = top_up(alice, "50", "2026-03-10 09:30", "pi_alice_1")
    alpha, beta = make_job(alice, "alpha"), make_job(alice, "beta")
    ticks(make_allocation(alpha, "rtx-4090", 1, "2026-03-10 10:59:50"), "2026-03-10 10:59:50", 3, "0.01")
    ticks(make_allocation(beta, "a100-80g", 1, "2026-03-10 11:00"), "2026-03-10 11:00", 2, "0.02")
    refund(payment, "10", "2026-03-10 12:00")
    transfer(  # reserved spot chips are charged without a meter Charge row: their own line
        key="reserved:1",
        kind=TransactionKind.CHARGE,
        source=wallet_for(alice),
        destination=platform_account(AccountKind.REVENUE),
        amount=to_micros("0.30"),
        memo="Reserved spot chips, 1× rtx-4090",
        now=at("2026-03-10 12:30"),
    )
    rows = LedgerHistory(alice)[0:10]
    assert [(r.kind, r.job_id, r.ticks, r.amount) for r in rows] == [
        (TransactionKind.CHARGE, None, 0, -to_micros("0.30")),
        (TransactionKind.REFUND, None, 0, -to_micros("10")),
        (METER, beta.pk, 2, -to_micros("0.04")),
        (METER, alpha.pk, 2, -to_micros("0.02")),  # posted at 11:00:00 and 11:00:05
        (METER, alpha.pk, 1, -to_micros("0.01")),  # posted at 10:59:55
        (TransactionKind.TOPUP, None, 0, to_micros("50")),
        (TransactionKind.ADJUSTMENT, None, 0, to_micros("100")),
    ]
    assert rows[0].description == "Reserved spot chips, 1× rtx-4090"
    page = alice_client.get(reverse("billing")).content.decode()
    assert rows_of(page, "ledger-group") == 3 and rows_of(page, "ledger-entry") == 4
    assert money("+¥50.00") in page and money("−¥10.00") in page


def test_the_ledger_pages_by_group_in_the_database(catalog, alice, alice_client, django_assert_num_queries):
    fund(alice, "100", "2026-03-01 00:00")
    alpha = make_job(alice, "alpha")
    allocation = make_allocation(alpha, "rtx-4090", 1, "2026-03-01 00:00")
    for hour in range(30):
        ticks(
            allocation, f"2026-03-01 {hour % 24:02d}:00" if hour < 24 else f"2026-03-02 {hour - 24:02d}:00", 2, "0.01"
        )
    history = LedgerHistory(alice)
    with django_assert_num_queries(2):  # the page's groups, then its jobs' names: never the 60 charges
        first = history[0:25]
    assert len(first) == 25 and all(row.kind == METER and row.ticks == 2 for row in first)
    assert history.count() == 31
    second = alice_client.get(reverse("billing"), {"page": 2})
    assert len(second.context["ledger_rows"]) == 6
    assert "Page 2 of 2" in second.content.decode()


def test_a_group_is_shown_only_to_its_owner(hundred_ticks, client, bob):
    client.force_login(bob)
    url = reverse("ledger_group", args=[hundred_ticks.pk, int(at("2026-03-10 10:00").timestamp())])
    assert client.get(url).status_code == 404


def test_a_time_that_is_not_the_start_of_an_hour_is_refused_with_a_message(hundred_ticks, alice_client):
    response = alice_client.get(reverse("ledger_group", args=[hundred_ticks.pk, 1234]))
    assert response.status_code == 400
    assert "1234 is not the start of an hour" in response.content.decode()

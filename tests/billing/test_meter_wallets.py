"""A tick pays each wallet's charges with one ledger transaction and writes one Charge row per billing line
(a job's allocations of one chip type and mode); the database checks the rows it writes."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.db import IntegrityError, connection, transaction
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from billing.choices import AccountKind, TransactionKind
from billing.models import Charge, Entry, Transaction
from billing.services.credits import adjust_credit
from billing.services.ledger import audit_ledger, balance_of, platform_account, transfer, wallet_for
from billing.services.meter import charge_allocations, due_lines, owed, run_meter
from billing.services.meter.columns import PriceLines, to_us
from billing.services.pricing import PriceBook
from fleet.choices import AllocationMode, JobStatus
from fleet.models import Allocation, Job
from tests.support.lines import line_of
from tests.support.meter import FOUR_CHIPS_PER_HOUR, T0, exact_cost, fund, open_allocation, set_price

pytestmark = pytest.mark.django_db

HOUR = T0 + timedelta(seconds=3600)


@pytest.fixture
def two_owners(alice, bob, enroll, planning_job):  # noqa: F811
    """Alice's and Bob's allocations on one node, their ids interleaved."""
    fund(alice)
    fund(bob)
    node, _ = enroll("wallets", chips=8)
    jobs = {
        alice: planning_job(status=JobStatus.RUNNING),
        bob: Job.objects.create(
            owner=bob,
            model_name="llama-tiny",
            per_device_batch_size=4,
            max_steps=10,
            max_budget_per_hour=28_000_000,
            status=JobStatus.RUNNING,
        ),
    }
    allocations = {alice: [], bob: []}
    for _ in range(3):
        for user in (alice, bob):
            allocations[user].append(open_allocation(jobs[user], node))
    return allocations


def charge_transactions() -> list[Transaction]:
    return list(Transaction.objects.filter(kind=TransactionKind.CHARGE).order_by("pk"))


def test_a_tick_posts_one_transaction_per_wallet_that_pays_exactly_its_charges(two_owners, alice, bob):
    result = run_meter(HOUR)

    assert (result.allocations, result.charges, result.transactions) == (6, 2, 2)
    revenue = platform_account(AccountKind.REVENUE)
    for user in (alice, bob):
        [paid] = Transaction.objects.filter(kind=TransactionKind.CHARGE, entries__account=wallet_for(user))
        [line] = Charge.objects.filter(transaction=paid)  # the user's three allocations: one job, chip type, mode
        allocations = two_owners[user]
        assert (line.allocation_id, line.owner_id, line.job_id) == (None, user.pk, allocations[0].job_id)
        assert (line.chips, line.seconds, line.chip_seconds) == (3 * 4, 3600, 3 * 4 * 3600)
        assert (line.started_at, line.ended_at, line.amount) == (T0, HOUR, 3 * FOUR_CHIPS_PER_HOUR)
        legs = dict(paid.entries.values_list("account_id", "amount"))
        assert legs == {wallet_for(user).pk: -3 * FOUR_CHIPS_PER_HOUR, revenue.pk: 3 * FOUR_CHIPS_PER_HOUR}
        assert balance_of(user) == 10**12 - 3 * FOUR_CHIPS_PER_HOUR
    assert platform_account(AccountKind.REVENUE).balance == 6 * FOUR_CHIPS_PER_HOUR
    assert audit_ledger() == []


def test_a_batch_holds_a_wallets_allocations_together_so_it_is_charged_once(two_owners):
    """Batches of three allocations, ids interleaved alice/bob: each wallet's line fills a batch."""
    result = run_meter(HOUR, batch=3)
    assert (result.allocations, result.transactions) == (6, 2)
    assert [txn.charges.count() for txn in charge_transactions()] == [1, 1]


def test_a_line_with_more_allocations_than_a_batch_is_billed_whole(two_owners, alice):
    result = run_meter(HOUR, batch=2)
    assert (result.allocations, result.charges, result.transactions) == (6, 2, 2)
    assert sorted(Charge.objects.values_list("chips", flat=True)) == [12, 12]
    assert balance_of(alice) == 10**12 - 3 * FOUR_CHIPS_PER_HOUR


def test_a_wallet_with_more_lines_than_a_batch_holds_is_charged_once_per_batch(two_owners, alice, enroll):  # noqa: F811
    other, _ = enroll("wallets-2", chip="tpu-v5e", chips=8)  # another chip type: a second line for alice's job
    open_allocation(two_owners[alice][0].job, other, chips=4)
    result = run_meter(HOUR, batch=3)
    assert (result.lines, result.transactions) == (3, 3)  # alice's two lines in two batches, bob's in one
    assert sorted(txn.charges.count() for txn in charge_transactions()) == [1, 1, 1]
    assert balance_of(alice) == 10**12 - 3 * FOUR_CHIPS_PER_HOUR - exact_cost(Allocation.objects.last(), HOUR)


def test_a_second_tick_at_the_same_time_finds_nothing_due_and_writes_nothing(two_owners):
    run_meter(HOUR)
    rows = Transaction.objects.count(), Entry.objects.count(), Charge.objects.count()
    assert not due_lines(HOUR)
    assert not due_lines(HOUR + timedelta(microseconds=999_999))
    assert [count for _, _, count in due_lines(HOUR + timedelta(seconds=1))] == [3, 3]
    again = run_meter(HOUR)
    assert (again.lines, again.allocations, again.charges, again.transactions) == (0, 0, 0, 0)
    assert (Transaction.objects.count(), Entry.objects.count(), Charge.objects.count()) == rows


def test_a_short_wallet_pays_what_it_has_and_owes_the_rest(two_owners, alice, bob):
    """1.5 allocations' worth for a line of three: the line is paid that much, the rest stays owed."""
    adjust_credit(alice, -(10**12) + FOUR_CHIPS_PER_HOUR * 3 // 2, reason="drain", actor=None, key="drain")
    result = charge_allocations([a.pk for a in two_owners[alice] + two_owners[bob]], HOUR)

    line = line_of(two_owners[alice][0])
    assert line.billed_through == HOUR  # the mark moves on whether or not it was paid
    assert (line.charged_total, line.chip_seconds) == (FOUR_CHIPS_PER_HOUR * 3 // 2, 3 * 4 * 3600)
    assert balance_of(alice) == 0
    [row] = Charge.objects.filter(owner=alice)
    assert (row.amount, row.chips, row.chip_seconds) == (FOUR_CHIPS_PER_HOUR * 3 // 2, 12, 12 * 3600)
    assert sum(s.shortfall for s in result.shortfalls) == FOUR_CHIPS_PER_HOUR * 3 // 2
    assert balance_of(bob) == 10**12 - 3 * FOUR_CHIPS_PER_HOUR
    assert audit_ledger() == []


def test_ticks_add_up_per_allocation_with_wallet_transactions(two_owners, alice):
    for seconds in (1, 7, 60, 61, 600, 3599, 3600):
        run_meter(T0 + timedelta(seconds=seconds, microseconds=400_000))
    line = line_of(two_owners[alice][0])
    assert line.charged_total == sum(exact_cost(allocation, HOUR) for allocation in two_owners[alice])
    rows = Charge.objects.filter(owner=alice).order_by("started_at")
    assert sum(rows.values_list("chip_seconds", flat=True)) == line.chip_seconds == 3 * 4 * 3600
    assert sum(rows.values_list("amount", flat=True)) == line.charged_total
    # The line's rows tile its time: each starts where the one before ended (at the tick).
    spans = list(rows.values_list("started_at", "ended_at"))
    assert [start for start, _ in spans[1:]] == [end for _, end in spans[:-1]]
    assert (spans[0][0], spans[-1][1]) == (T0, HOUR + timedelta(microseconds=400_000))
    assert len(charge_transactions()) == 2 * 7


def test_a_charge_inside_a_callers_transaction_leaves_its_planner_settings_alone(two_owners, alice):
    """The meter steers the planner only in a transaction of its own (the setting lasts until commit)."""
    with transaction.atomic():
        charge_allocations([a.pk for a in two_owners[alice]], HOUR)
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('enable_hashjoin'), current_setting('enable_mergejoin')")
            assert cursor.fetchone() == ("on", "on")
    assert balance_of(alice) == 10**12 - 3 * FOUR_CHIPS_PER_HOUR


# The database's own checks on what a tick writes ------------------------------------------------


def insert_charge(allocation, txn, **changes) -> None:
    row = {
        "allocation_id": allocation.pk,
        "job_id": allocation.job_id,
        "owner_id": allocation.job.owner_id,
        "chip_type_id": allocation.chip_type_id,
        "mode": allocation.mode,
        "chips": allocation.chips,
        "started_at": allocation.started_at,
        "ended_at": allocation.started_at + timedelta(seconds=1),
        "seconds": 1,
        "chip_seconds": allocation.chips,
        "amount": 1,
        "transaction_id": txn.pk,
        "created_at": allocation.started_at,
        **changes,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO billing_charge ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})", list(row.values())
        )


@pytest.fixture
def paid_by(alice):
    def post(kind=TransactionKind.CHARGE, key="raw-charge") -> Transaction:
        return transfer(
            key=key,
            kind=kind,
            source=wallet_for(alice),
            destination=platform_account(AccountKind.REVENUE),
            amount=1,
        )

    return post


def test_the_database_accepts_a_charge_that_matches_its_allocation(two_owners, alice, paid_by):
    insert_charge(two_owners[alice][0], paid_by())
    assert Charge.objects.count() == 1


@pytest.mark.parametrize(
    "changes",
    [
        {"owner_id": "bob"},
        {"job_id": "bob's job"},
        {"chip_type_id": 999_999},
        {"mode": "spot"},
        {"chips": 3},
        {"allocation_id": 999_999},
        {"transaction_id": 999_999},
    ],
    ids=lambda changes: next(iter(changes)),
)
def test_the_database_refuses_a_charge_that_does_not_match_its_allocation(two_owners, alice, bob, paid_by, changes):
    allocation, txn = two_owners[alice][0], paid_by()
    values = {"bob": bob.pk, "bob's job": two_owners[bob][0].job_id}
    changes = {column: values.get(value, value) for column, value in changes.items()}
    with pytest.raises(IntegrityError, match="does not match job"):
        insert_charge(allocation, txn, **changes)
    assert not Charge.objects.exists()


def test_the_database_accepts_a_billing_line_charge_that_names_no_allocation(two_owners, alice, paid_by):
    insert_charge(two_owners[alice][0], paid_by(), allocation_id=None, chips=12, chip_seconds=12)
    assert Charge.objects.get().allocation_id is None


@pytest.mark.parametrize(
    "changes",
    [{"owner_id": "bob"}, {"job_id": 999_999}, {"chip_type_id": 999_999}, {"transaction_id": 999_999}],
    ids=lambda changes: next(iter(changes)),
)
def test_the_database_refuses_a_billing_line_charge_with_the_wrong_owner_job_chip_type_or_payment(
    two_owners, alice, bob, paid_by, changes
):
    allocation, txn = two_owners[alice][0], paid_by()
    changes = {column: bob.pk if value == "bob" else value for column, value in changes.items()}
    with pytest.raises(IntegrityError, match="does not match job"):
        insert_charge(allocation, txn, allocation_id=None, **changes)
    assert not Charge.objects.exists()


def test_the_database_refuses_a_charge_paid_by_a_transaction_that_is_not_a_charge(two_owners, alice, paid_by):
    with pytest.raises(IntegrityError, match="a CHARGE transaction must pay it"):
        insert_charge(two_owners[alice][0], paid_by(kind=TransactionKind.ADJUSTMENT))


def test_the_database_refuses_legs_in_another_currency_added_to_a_transaction(alice):
    """Each INSERT's legs balance on their own; they must also stay in the transaction's currency."""
    fund(alice)
    txn = Transaction.objects.get(kind=TransactionKind.ADJUSTMENT)
    dollars = [platform_account(AccountKind.ADJUSTMENTS, "USD"), platform_account(AccountKind.PROMOTIONS, "USD")]
    with pytest.raises(IntegrityError, match="unbalanced"), transaction.atomic():
        Entry.objects.bulk_create(
            [
                Entry(transaction=txn, account=dollars[0], amount=5, created_at=txn.created_at),
                Entry(transaction=txn, account=dollars[1], amount=-5, created_at=txn.created_at),
            ]
        )
    assert txn.entries.count() == 2


# The batch's running price sums -----------------------------------------------------------------

offsets = st.integers(min_value=0, max_value=7200 * 10**6)


def at(us: int):
    return T0 + timedelta(microseconds=us)


def book_of(prices, clearings) -> PriceBook:
    """Chip type 7's book: (offset, on-demand, floor) prices and (offset, price) clearings."""
    return PriceBook(
        [(7, at(offset), on_demand, floor) for offset, on_demand, floor in prices],
        [(7, at(offset), clearing) for offset, clearing in clearings],
    )


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    prices=st.lists(st.tuples(offsets, st.integers(0, 9_000_000), st.integers(0, 9_000_000)), min_size=1, max_size=6),
    clearings=st.lists(st.tuples(offsets, st.integers(0, 9_000_000)), max_size=4),
    spans=st.lists(st.tuples(offsets, offsets), min_size=1, max_size=8),
    mode=st.sampled_from([AllocationMode.ON_DEMAND, AllocationMode.SPOT]),
)
def test_the_batchs_running_sums_give_the_price_books_integral_exactly(prices, clearings, spans, mode):
    book = book_of(prices, clearings)
    spans = [(at(min(a, b)), at(max(a, b))) for a, b in spans]
    lines = PriceLines(book, {(7, mode): (min(lo for lo, _ in spans), max(hi for _, hi in spans))})
    lo = np.array([to_us(lo) for lo, _ in spans], dtype=np.int64)
    hi = np.array([to_us(hi) for _, hi in spans], dtype=np.int64)
    (a0, b0), (a1, b1) = lines.running((7, mode), lo), lines.running((7, mode), hi)
    for index, (start, end) in enumerate(spans):
        halves = int(a1[index] - a0[index]) * 10**6 + int(b1[index] - b0[index])
        assert halves == book.integral(7, mode, start, end)


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    prices=st.lists(st.tuples(offsets, st.integers(0, 90_000_000), st.integers(0, 90_000_000)), min_size=1, max_size=6),
    clearings=st.lists(st.tuples(offsets, st.integers(0, 90_000_000)), max_size=4),
    spans=st.lists(st.tuples(offsets, offsets, st.integers(1, 512)), min_size=1, max_size=8),
    mode=st.sampled_from([AllocationMode.ON_DEMAND, AllocationMode.SPOT]),
)
def test_the_batchs_columns_owe_what_each_allocation_owes_alone(prices, clearings, spans, mode):
    book = book_of(prices, clearings)
    spans = [(at(min(a, b)), at(max(a, b)), chips) for a, b, chips in spans]
    lines = PriceLines(book, {(7, mode): (min(lo for lo, _, _ in spans), max(hi for _, hi, _ in spans))})
    chips = np.array([chips for _, _, chips in spans], dtype=np.int64)
    assert lines.fits(chips)
    columns = lines.owed(
        (7, mode),
        chips,
        np.array([to_us(lo) for lo, _, _ in spans], dtype=np.int64),
        np.array([to_us(hi) for _, hi, _ in spans], dtype=np.int64),
    )
    assert columns.tolist() == [owed(book, 7, mode, chips, lo, hi) for lo, hi, chips in spans]


def test_prices_too_large_for_int64_halves_are_charged_exactly_one_by_one(alice, enroll, planning_job):  # noqa: F811
    """A price of 10^13 micro-units an hour over an hour cannot be summed in an int64: the meter
    notices and prices those allocations with Python's integers instead."""
    lines = PriceLines(PriceBook([(7, T0, 10**13, 10**13)]), {(7, AllocationMode.ON_DEMAND): (T0, HOUR)})
    assert not lines.fits(np.array([1]))
    fund(alice, 10**17)
    node, _ = enroll("huge", chips=8)
    set_price(node.pool.chip_type, T0, 10**13)
    allocation = open_allocation(planning_job(status=JobStatus.RUNNING), node, chips=3)
    run_meter(HOUR + timedelta(microseconds=999_999))
    assert line_of(allocation).charged_total == 3 * 10**13

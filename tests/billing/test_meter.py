"""The meter bills every second exactly once, whatever the ticks (docs/RELIABILITY.md #6, #15)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier

import pytest
from django.db import connection
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from billing.choices import TransactionKind
from billing.models import Charge, Transaction
from billing.services.credits import adjust_credit
from billing.services.ledger import balance_of, wallet_for
from billing.services.meter import charge_allocation, charge_allocations, run_meter
from fleet.choices import AllocationMode, JobStatus
from fleet.models import Allocation
from tests.support.lines import line_of
from tests.support.meter import FOUR_CHIPS_PER_HOUR, T0, exact_cost, fund, open_allocation, set_price
from tests.support.plans import hand_plan
from workers.services.allocations import release
from workers.services.placement import allocate


@pytest.fixture
def placed(alice, enroll, planning_job):  # noqa: F811
    fund(alice)
    node, _ = enroll("meter-node", chips=8)
    return planning_job(status=JobStatus.RUNNING), node


micros = st.integers(min_value=0, max_value=4000 * 10**6)


@pytest.mark.django_db
@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    duration=micros,
    ticks=st.lists(micros, max_size=12),
    changes=st.lists(st.tuples(micros, st.integers(min_value=1, max_value=9_000_000)), max_size=4),
    whole_second_changes=st.booleans(),
    spot=st.booleans(),
    chips=st.integers(min_value=1, max_value=8),
)
def test_many_ticks_add_up_to_one_charge_over_the_whole_span(
    placed, duration, ticks, changes, whole_second_changes, spot, chips
):
    job, node = placed
    start = (Allocation.objects.order_by("-started_at").values_list("started_at", flat=True).first() or T0) + timedelta(
        days=1
    )
    at = lambda us: start + timedelta(microseconds=us)  # noqa: E731
    for offset, per_hour in changes:
        set_price(
            node.pool.chip_type, at(offset - offset % 10**6 if whole_second_changes else offset), per_hour * 2, per_hour
        )
    mode = AllocationMode.SPOT if spot else AllocationMode.ON_DEMAND
    rows_before = Charge.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    ticked = open_allocation(job, node, start, chips, mode)
    charged_before = line_of(ticked).charged_total  # earlier examples' allocations share the line
    once = open_allocation(job, node, start, chips, mode, ended_at=at(duration))
    for tick in sorted(t for t in ticks if t < duration):
        charge_allocation(ticked.pk, at(tick))
    Allocation.objects.filter(pk=ticked.pk).update(ended_at=at(duration))
    charge_allocation(ticked.pk, at(duration))
    charge_allocation(ticked.pk, at(duration) + timedelta(seconds=30))
    charge_allocation(once.pk, at(duration) + timedelta(hours=2))

    ticked.refresh_from_db()
    once.refresh_from_db()
    last_second = start + timedelta(seconds=duration // 10**6)
    assert ticked.billed_through == once.billed_through == last_second
    assert ticked.charged_total == once.charged_total == exact_cost(once, last_second)
    # Both allocations are one billing line (job, chip type, mode), folded into it when they ended.
    assert line_of(ticked).charged_total - charged_before == ticked.charged_total + once.charged_total
    rows = Charge.objects.filter(pk__gt=rows_before)
    assert sum(rows.values_list("amount", flat=True)) == ticked.charged_total + once.charged_total
    # A tick that owed nothing (a free span) writes no row, so its chip-seconds are not in them.
    assert sum(rows.values_list("chip_seconds", flat=True)) <= 2 * chips * (duration // 10**6)


@pytest.mark.django_db
def test_a_tick_bills_whole_seconds_since_the_start(placed):
    job, node = placed
    allocation = open_allocation(job, node, T0 + timedelta(microseconds=250_000))
    charge_allocation(allocation.pk, T0 + timedelta(seconds=10, microseconds=100_000))
    line = line_of(allocation)
    assert (line.billed_through, line.chip_seconds) == (T0 + timedelta(seconds=10, microseconds=100_000), 4 * 9)
    assert line.charged_total == exact_cost(allocation, T0 + timedelta(seconds=9, microseconds=250_000))
    charge = Charge.objects.get()
    assert (charge.seconds, charge.chip_seconds, charge.amount) == (9, 4 * 9, line.charged_total)
    # An open allocation's own row is not written: its billing is its line's until it ends.
    allocation.refresh_from_db()
    assert (allocation.billed_through, allocation.charged_total) == (allocation.started_at, 0)


@pytest.mark.django_db
def test_a_price_change_applies_from_its_second_on(placed):
    job, node = placed
    set_price(node.pool.chip_type, T0 + timedelta(seconds=100), 3_600_000)
    set_price(node.pool.chip_type, T0 + timedelta(seconds=200), 7_200_000)
    allocation = open_allocation(job, node, T0 + timedelta(seconds=100), chips=1)
    charge_allocation(allocation.pk, T0 + timedelta(seconds=300))
    assert line_of(allocation).charged_total == 100 * 1_000 + 100 * 2_000  # 1,000 then 2,000 micro-units a second


@pytest.mark.django_db
def test_the_same_tick_twice_charges_once(placed, alice):
    job, node = placed
    allocation = open_allocation(job, node)
    now = T0 + timedelta(seconds=61)
    first = charge_allocation(allocation.pk, now)
    second = charge_allocation(allocation.pk, now)
    assert (first.charges, second.charges) == (1, 0)
    assert Charge.objects.count() == 1
    [paid] = Transaction.objects.filter(kind=TransactionKind.CHARGE)
    assert paid.idempotency_key.startswith(f"meter:w{wallet_for(alice).pk}:")
    assert (paid.charges.get().job_id, paid.charges.get().chip_seconds) == (job.pk, 4 * 61)
    assert balance_of(alice) == 10**12 - exact_cost(allocation, now)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("runner", ["charge_allocation", "run_meter"])
def test_concurrent_ticks_for_the_same_interval_charge_once(placed, alice, runner):
    job, node = placed
    allocations = [open_allocation(job, node) for _ in range(5)]
    now = T0 + timedelta(seconds=3600)
    barrier = Barrier(8)

    def tick(_):
        barrier.wait()
        try:
            if runner == "run_meter":
                return run_meter(now).allocations
            return sum(charge_allocation(a.pk, now).allocations for a in allocations)
        finally:
            connection.close()

    with ThreadPoolExecutor(8) as pool:
        billed = sum(pool.map(tick, range(8)))

    assert billed == 5
    # One billing line, billed once: one Charge row for its 20 chips, 5 hours' worth.
    charge = Charge.objects.get()
    assert (charge.chips, charge.amount) == (20, 5 * FOUR_CHIPS_PER_HOUR)
    assert balance_of(alice) == 10**12 - 5 * FOUR_CHIPS_PER_HOUR


@pytest.mark.django_db
def test_run_meter_bills_open_and_just_ended_allocations_and_skips_finished_ones(placed):
    job, node = placed
    running = open_allocation(job, node)
    ended = open_allocation(job, node, ended_at=T0 + timedelta(seconds=30, microseconds=5))
    done = open_allocation(job, node, ended_at=T0 + timedelta(seconds=30), mode=AllocationMode.SPOT)  # its own line
    charge_allocation(done.pk, T0 + timedelta(seconds=40))
    result = run_meter(T0 + timedelta(seconds=60))
    # The on-demand line: the running allocation's 60 s and the one that just ended's 30 s, which is
    # folded in. The spot line was billed and folded in at 40 s: nothing to do.
    assert (result.lines, result.charges, result.seconds, result.settled) == (1, 1, 4 * (60 + 30), 1)
    for allocation, through in [(running, 0), (ended, 30), (done, 30)]:
        allocation.refresh_from_db()
        assert allocation.billed_through == T0 + timedelta(seconds=through)
    assert line_of(running).billed_through == T0 + timedelta(seconds=60)
    assert run_meter(T0 + timedelta(seconds=60)).charges == 0


@pytest.mark.django_db
def test_release_makes_the_final_charge_through_the_end(alice, enroll, planning_job):  # noqa: F811
    fund(alice)
    node, _ = enroll("final", chips=2)
    job = planning_job()
    [allocation] = allocate(job, hand_plan((node, 1), (node, 1)), now=T0)
    charge_allocation(allocation.pk, T0 + timedelta(seconds=10))
    release(job, now=T0 + timedelta(seconds=95, microseconds=900_000))
    allocation.refresh_from_db()
    assert allocation.billed_through == T0 + timedelta(seconds=95)
    assert allocation.charged_total == exact_cost(allocation, allocation.billed_through)
    assert Charge.objects.filter(job=job).count() == 2


@pytest.mark.django_db
def test_a_wallet_that_cannot_cover_a_tick_pays_what_it_has_and_the_job_stops(
    placed, alice, mailoutbox, django_capture_on_commit_callbacks
):
    job, node = placed
    adjust_credit(alice, -(10**12 - 1_000), reason="drain", actor=None, key="drain")
    allocation = open_allocation(job, node)
    with django_capture_on_commit_callbacks(execute=True):
        charge_allocation(allocation.pk, T0 + timedelta(seconds=60))
    job.refresh_from_db()
    assert balance_of(alice) == 0
    line = line_of(allocation)
    assert line.charged_total == 1_000 and line.billed_through == T0 + timedelta(seconds=60)
    assert job.status == JobStatus.STOPPING and "Out of credit" in job.status_reason
    assert job.events.get(kind="notice").data["shortfall"] == exact_cost(allocation, T0 + timedelta(seconds=60)) - 1_000
    assert len(mailoutbox) == 1


@pytest.mark.django_db
def test_a_batch_tick_charges_many_allocations_in_one_transaction(placed, alice):
    job, node = placed
    ids = [open_allocation(job, node).pk for _ in range(50)]
    result = charge_allocations(ids, T0 + timedelta(seconds=3600))
    assert (result.allocations, result.charges) == (50, 1) and result.charged == 50 * FOUR_CHIPS_PER_HOUR
    assert balance_of(alice) == 10**12 - 50 * FOUR_CHIPS_PER_HOUR


@pytest.mark.django_db
def test_an_end_that_waited_for_a_later_tick_is_folded_in_and_the_line_comes_out_exact(placed):
    """`release` ended an allocation at 59.5 s while a tick at 60 s held its line: that tick billed it a
    second past its end. The final charge bills nothing twice, and the line's next tick nets the
    second out: it asks only for what the allocation still running adds."""
    job, node = placed
    staying, leaving = open_allocation(job, node), open_allocation(job, node)
    run_meter(T0 + timedelta(seconds=60))
    line = line_of(staying)
    billed = line.chip_seconds
    end = T0 + timedelta(seconds=59, microseconds=500_000)
    Allocation.objects.filter(pk=leaving.pk).update(ended_at=end)

    final = charge_allocations([leaving.pk], end)

    leaving.refresh_from_db()
    line.refresh_from_db()
    assert (final.charged, final.charges, final.settled) == (0, 0, 1)
    assert leaving.billed_through == T0 + timedelta(seconds=59)
    assert leaving.charged_total == line.settled_owed == exact_cost(leaving, leaving.billed_through)
    assert (line.chip_seconds, line.billed_through) == (billed, T0 + timedelta(seconds=60))
    run_meter(T0 + timedelta(seconds=120))
    line.refresh_from_db()
    assert line.charged_total == exact_cost(staying, T0 + timedelta(seconds=120)) + leaving.charged_total
    assert sum(Charge.objects.values_list("amount", flat=True)) == line.charged_total

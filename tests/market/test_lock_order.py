"""Placement and the market take their locks in one order (docs/ARCHITECTURE.md, "Locks"), so they never
deadlock; a transaction that still loses a deadlock is retried (docs/RELIABILITY.md #38).

The deadlock the December probes met in a two-user spot run: a placement locked its job and then the
job's bids; a clearing locked the chip type's bids and then, writing a reservation of the job's won
chips, needed the job's row (a reservation references its job). Each waited for the other and
PostgreSQL killed one ("deadlock detected"). The test below runs the two at once on the same bid, in
real threads with real connections, and steps them into exactly that interleaving: the placement
holds its job when the clearing starts.
"""

from __future__ import annotations

import logging
import threading

import psycopg.errors
import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from base.deadlocks import retry_on_deadlock
from billing.services.ledger import balance_of
from fleet.choices import JobStatus
from fleet.models import ChipType, Job, Node
from kernel.planner import Plan
from market.models import Bid, SpotReservation
from market.services import clearing as clearing_module
from market.services.clearing import clear_chip_type
from tests.support.locking import Worker, wait_for, waits_on_a_lock
from tests.support.spot import job_spec, online_node
from workers.services import lifecycle
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db(transaction=True)

BID = 1_000_000  # 1.00 per chip-hour


def spot_plan(node: Node) -> Plan:
    """One spot rank on `node`, priced, as the planner makes it for a spot job."""
    rank = {
        "chip": node.pool.chip_type.slug,
        "node_id": node.pk,
        "hostname": node.hostname,
        "micro_batch": 4,
        "mode": "spot",
        "tokens_per_s": 1000.0,
        "simulated": True,
        "paced_tokens_per_s": 1000.0,
    }
    return Plan.from_dict({"zero_stage": 0, "ranks": [rank], "price_per_hour": BID})


@pytest.fixture
def spot_job_being_planned(catalog, alice, fund):
    """Alice's spot job, claimed for planning, with an active bid for the one free spot RTX 4090."""
    fund(alice, "100")
    node = online_node("lock-order-4090", "rtx-4090")
    spec = job_spec(spot=True, spot_bid_per_hour=BID, allow_on_demand=False)
    job = Job.objects.create(owner=alice, status=JobStatus.PLANNING, **spec)
    chip = ChipType.objects.get(slug="rtx-4090")
    Bid.objects.create(owner=alice, job=job, chip_type=chip, chips=1, max_price_per_hour=BID, placed_at=timezone.now())
    return job, node


def test_a_placement_and_a_clearing_on_the_same_bid_at_once_never_deadlock(spot_job_being_planned, monkeypatch, caplog):
    job, node = spot_job_being_planned
    placement_holds_its_job = threading.Event()
    clearing_holds_the_bids = threading.Event()
    clearing = Worker(lambda: clear_chip_type(node.pool.chip_type_id))
    place, holdings = lifecycle.place, clearing_module.spot_holdings

    def place_once_the_clearing_is_in(job, plan, now):
        # The placement holds its job's row here. Go on once the clearing holds the bids, or is blocked
        # behind a lock this placement holds: whichever its lock order makes it do first.
        placement_holds_its_job.set()
        wait_for(
            lambda: clearing_holds_the_bids.is_set() or (clearing.pid is not None and waits_on_a_lock(clearing.pid)),
            "the clearing to lock the bids or to wait for the placement",
        )
        return place(job, plan, now)

    def holdings_once_the_bids_are_locked(chip_type_id):
        clearing_holds_the_bids.set()
        return holdings(chip_type_id)

    monkeypatch.setattr(lifecycle, "place", place_once_the_clearing_is_in)
    monkeypatch.setattr("market.services.clearing.spot_holdings", holdings_once_the_bids_are_locked)
    placement = Worker(lambda: allocate(job, spot_plan(node)))
    caplog.set_level(logging.WARNING, logger="base.deadlocks")

    placement.start()
    wait_for(placement_holds_its_job.is_set, "the placement to lock its job")
    clearing.start()
    held = placement.outcome()
    clearing.outcome()

    assert [allocation.node_id for allocation in held] == [node.pk]
    assert Job.objects.get(pk=job.pk).status == JobStatus.PROVISIONING
    # The job holds the chip its bid won: nothing is kept (and billed) for it beside its allocation.
    assert not SpotReservation.objects.filter(job=job, ended_at__isnull=True).exists()
    assert not [record.message for record in caplog.records if "deadlock" in record.message]


def test_the_job_locks_come_before_the_bid_locks_in_a_clearing(spot_job_being_planned, monkeypatch):
    """The clearing waits for a placement's job before it touches the job's bids."""
    job, node = spot_job_being_planned
    placed = threading.Event()
    release = threading.Event()

    def hold_the_job():
        with transaction.atomic():
            Job.objects.select_for_update().get(pk=job.pk)
            placed.set()
            wait_for(release.is_set, "the test to release the job")

    holder = Worker(hold_the_job)
    holder.start()
    wait_for(placed.is_set, "the job to be locked")
    clearing = Worker(lambda: clear_chip_type(node.pool.chip_type_id))
    clearing.start()
    try:
        wait_for(lambda: clearing.pid is not None and waits_on_a_lock(clearing.pid), "the clearing to wait")
        with connection.cursor() as cursor:  # the clearing waits for the job, holding no bid meanwhile
            cursor.execute("SELECT id FROM market_bid WHERE job_id = %s FOR UPDATE NOWAIT", [job.pk])
    finally:
        release.set()
    holder.outcome()
    assert clearing.outcome() is not None
    assert Bid.objects.get(job=job).won_chips == 1


# Retrying a transaction that lost a deadlock


def deadlock() -> OperationalError:
    """What Django raises when PostgreSQL picks this transaction as a deadlock's victim."""
    error = OperationalError("deadlock detected")
    error.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    return error


def test_a_transaction_that_loses_a_deadlock_is_run_again(caplog):
    calls = []

    @retry_on_deadlock(attempts=3)
    def work():
        calls.append(1)
        if len(calls) == 1:
            raise deadlock()
        return "done"

    assert work() == "done" and len(calls) == 2
    assert any("deadlock" in record.message for record in caplog.records)


def test_a_deadlock_lost_every_time_is_raised_after_a_few_attempts():
    calls = []

    @retry_on_deadlock(attempts=3)
    def work():
        calls.append(1)
        raise deadlock()

    with pytest.raises(OperationalError, match="deadlock"):
        work()
    assert len(calls) == 3


def test_other_database_errors_are_not_retried():
    calls = []

    @retry_on_deadlock(attempts=3)
    def work():
        calls.append(1)
        raise OperationalError("connection refused")

    with pytest.raises(OperationalError, match="refused"):
        work()
    assert len(calls) == 1


def test_inside_a_callers_transaction_the_deadlock_goes_to_the_caller():
    """Only the outermost transaction can be run again: the caller's own locks were lost with it."""
    calls = []

    @retry_on_deadlock(attempts=3)
    def work():
        calls.append(1)
        raise deadlock()

    with pytest.raises(OperationalError), transaction.atomic():
        work()
    assert len(calls) == 1


def test_two_transactions_that_really_deadlock_both_finish_once_retried(alice, bob):
    """Two rows locked in opposite orders: PostgreSQL kills one, which runs again after the other commits."""
    first_locked = {alice.pk: threading.Event(), bob.pk: threading.Event()}

    @retry_on_deadlock(attempts=3)
    def lock_both(first, second):
        with transaction.atomic():
            type(first).objects.select_for_update().get(pk=first.pk)
            first_locked[first.pk].set()
            wait_for(first_locked[second.pk].is_set, "the other transaction's first lock")
            type(second).objects.select_for_update().get(pk=second.pk)
            return balance_of(first)

    one, other = Worker(lambda: lock_both(alice, bob)), Worker(lambda: lock_both(bob, alice))
    one.start()
    other.start()
    assert (one.outcome(), other.outcome()) == (0, 0)

"""Concurrent credit decisions of one owner never hold more than the balance covers (docs/RELIABILITY.md #27).

Real threads, each on its own database connection, all released at once. The window between
reading the balance and writing the bid or job is widened (reading the balance takes 0.3 s), so
without the per-owner credit lock every request would pass its check; the control tests take the
lock out and show exactly that, so the main tests fail if the lock is removed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from billing.models import OperatorSettings
from billing.services.holds import HoldRefused
from billing.services.ledger import balance_of
from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from kernel.money import to_micros
from market.models import Bid, MarketSettings
from market.services.bids import BidRefused, place_bid
from market.services.commitments import commitments
from tests.support.plans import hand_plan
from tests.support.spot import job_spec, launch_fields, online_node
from workers.services.launch import LaunchRefused, launch
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db(transaction=True)  # each thread commits on its own connection

BID_PRICE = 1_200_000  # 1.20/h: 5 minutes of one chip hold 0.10
BALANCE = "0.15"  # covers one such hold, not two


@pytest.fixture(autouse=True)
def no_background_work(monkeypatch):
    monkeypatch.setattr("market.tasks.clear_market.delay", lambda *args, **kwargs: None)
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda *args, **kwargs: None)


@pytest.fixture
def slow_balance(monkeypatch):
    """Reading the balance takes 0.3 s: every request is inside its check at the same time."""
    from billing.services import ledger

    def slow(user):
        balance = ledger.balance_of(user)
        time.sleep(0.3)
        return balance

    monkeypatch.setattr("market.services.bids.balance_of", slow)
    monkeypatch.setattr("billing.services.holds.balance_of", slow)


@pytest.fixture
def no_credit_lock(monkeypatch):
    for where in ("market.services.bids", "workers.services.launch", "workers.services.placement"):
        monkeypatch.setattr(f"{where}.lock_credit", lambda owner: None)


@pytest.fixture
def alice_with_a_little(catalog, alice, fund):
    fund(alice, BALANCE)
    online_node("spot-4090", "rtx-4090", chips=8)
    # The settings rows exist on a running platform; created here, so that their first insert (which
    # concurrent get_or_create calls wait on) can't serialise the threads by accident.
    OperatorSettings.load()
    MarketSettings.load()
    return alice


def at_once(count: int, work):
    """Run work(i) for i in range(count) in threads released together; each result or the exception raised."""
    start = threading.Barrier(count)

    def attempt(index: int):
        try:
            start.wait()
            return work(index)
        except (BidRefused, LaunchRefused, HoldRefused) as refused:
            return refused
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(attempt, range(count)))


def spot_jobs(owner, count: int) -> list[Job]:
    return [Job.objects.create(owner=owner, **job_spec(spot=True, spot_bid_per_hour=BID_PRICE)) for _ in range(count)]


def bid_for(owner, jobs: list[Job]):
    chip = ChipType.objects.get(slug="rtx-4090")
    return lambda i: place_bid(owner, job=jobs[i], chip_type=chip, chips=1, max_price_per_hour=BID_PRICE)


def launch_one(owner):
    return lambda i: launch(owner, launch_fields(name=f"race {i}"))  # one RTX 4090 at 1.20/h: holds 0.10


def test_six_concurrent_bids_at_a_balance_that_holds_one_place_exactly_one(alice_with_a_little, slow_balance):
    alice = alice_with_a_little
    results = at_once(6, bid_for(alice, spot_jobs(alice, 6)))

    placed = [r for r in results if isinstance(r, Bid)]
    refused = [r for r in results if isinstance(r, BidRefused)]
    assert len(placed) == 1 and len(refused) == 5, results
    assert all(r.field == "balance" for r in refused)
    assert commitments(alice).total() <= balance_of(alice)


def test_four_concurrent_launches_at_a_balance_that_holds_one_queue_exactly_one(alice_with_a_little, slow_balance):
    alice = alice_with_a_little
    results = at_once(4, launch_one(alice))

    queued = [r for r in results if isinstance(r, Job)]
    refused = [r for r in results if isinstance(r, LaunchRefused)]
    assert len(queued) == 1 and len(refused) == 3, results
    assert {r.code for r in refused} == {"insufficient_credit"}
    assert Job.objects.filter(owner=alice).count() == 1
    assert commitments(alice).total() <= balance_of(alice)


def test_bids_and_launches_racing_each_other_share_one_balance(alice_with_a_little, slow_balance):
    alice = alice_with_a_little
    jobs = spot_jobs(alice, 3)
    bid, start = bid_for(alice, jobs), launch_one(alice)
    results = at_once(6, lambda i: bid(i) if i < 3 else start(i))

    succeeded = [r for r in results if isinstance(r, Bid | Job)]
    assert len(succeeded) == 1, results
    assert commitments(alice).total() <= balance_of(alice)


def test_without_the_credit_lock_the_same_bids_overdraw(alice_with_a_little, slow_balance, no_credit_lock):
    """The control: what the lock prevents really happens without it (so the tests above would fail)."""
    alice = alice_with_a_little
    results = at_once(6, bid_for(alice, spot_jobs(alice, 6)))

    assert sum(isinstance(r, Bid) for r in results) > 1, [(type(r), str(r)) for r in results]
    assert commitments(alice).total() > balance_of(alice)


def test_without_the_credit_lock_the_same_launches_overdraw(alice_with_a_little, slow_balance, no_credit_lock):
    alice = alice_with_a_little
    results = at_once(4, launch_one(alice))

    assert sum(isinstance(r, Job) for r in results) > 1
    assert commitments(alice).total() > balance_of(alice)


def test_a_placement_counts_what_the_owners_queued_jobs_already_hold(alice_with_a_little):
    alice = alice_with_a_little
    waiting = launch(alice, launch_fields())
    assert waiting.credit_hold > 0 and waiting.status == JobStatus.QUEUED
    node = online_node("od-4090", "rtx-4090", spot=False)
    other = Job.objects.create(owner=alice, **job_spec(status=JobStatus.PLANNING))

    # alone it would fit (0.10 of a 0.15 balance); on top of the queued job's hold it doesn't
    plan = hand_plan((node, 4), price_per_hour=to_micros("1.20"))
    assert allocate(other, plan) == []

    other.refresh_from_db()
    assert other.status == JobStatus.FAILED and "held by your queued jobs and bids" in other.status_reason

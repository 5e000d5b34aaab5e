"""Chips a bid wins are billed from the moment won, whether or not its job runs on them (docs/RELIABILITY.md #26).

Alice runs a spot job on the only spot RTX 4090 at her bid of 0.80/h. Bob's waiting spot job outbids
her: she gets notice and moves off, and the chip is kept for bob. Before this, bob could cancel his
job before it took the chip up and pay nothing, again and again with a new job each time. Now the
chip is bob's to pay from the win (at the spot price each second, as the meter bills a spot
allocation) until his job holds it, his bid stops winning it, or the bid ends.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from billing.models import Price, Transaction
from billing.services.credits import adjust_credit
from billing.services.ledger import balance_of
from billing.services.meter import charge_allocations
from billing.services.reservations import ReservedSpan, charge_reserved_spans
from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from kernel.money import cost_of_integral, to_micros
from market.models import Bid, BidStatus, SpotReservation
from market.services.bids import cancel_bid, place_bid
from market.services.clearing import clear_chip_type, take_up_seconds
from market.services.reservations import end_bid_reservations
from tests.support.accounts import token_client
from tests.support.lines import line_charged
from tests.support.spot import job_spec, spot_job
from workers.services.lifecycle import resume as continue_migration
from workers.services.scheduling import schedule

# The market clears after each commit; its follow-up tasks run inline.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]

ALICES_BID = 800_000  # 0.80 per chip-hour: the highest losing bid, so the price bob's win clears at


@pytest.fixture
def clock():
    """Time stands still at `clock.start` until the test moves it."""
    start = timezone.now().replace(microsecond=0) + timedelta(seconds=5)
    with time_machine.travel(start, tick=False) as traveller:
        traveller.start = start
        yield traveller


def rtx_4090() -> ChipType:
    return ChipType.objects.get(slug="rtx-4090")


def cost(*spans: tuple[int, int]) -> int:
    """What one chip costs over (seconds, price per hour) spans, summed and then rounded once, half up."""
    return cost_of_integral(sum(seconds * 1_000_000 * per_hour for seconds, per_hour in spans))


def bob_outbids_alice(alices_job: Job, bob, bid: str = "1.20") -> Job:
    """Bob's waiting spot job bids above alice and wins her chip; she gets notice. Returns bob's job."""
    spec = job_spec(spot=True, spot_bid_per_hour=600_000, allow_on_demand=False)
    bobs_job = Job.objects.create(owner=bob, **spec)  # queued, not scheduled yet
    place_bid(bob, job=bobs_job, chip_type=rtx_4090(), chips=1, max_price_per_hour=to_micros(bid))
    alices_job.refresh_from_db()
    assert alices_job.status == JobStatus.MIGRATING and alices_job.migrations.get().reason == "outbid"
    assert Bid.objects.get(job=bobs_job).won_chips == 1
    return bobs_job


def test_a_job_cancelled_before_it_takes_up_the_chips_it_won_pays_for_them_from_the_win(
    alices_running_job, bob, clock, client
):
    before = balance_of(bob)

    bobs_job = spot_job(bob, "1.20")  # no free chip: it outbids alice's 0.80 for hers and waits for it
    bobs_job.refresh_from_db()
    assert bobs_job.status == JobStatus.QUEUED and "outbid lower spot bids" in bobs_job.status_reason
    alices_running_job.refresh_from_db()
    assert alices_running_job.status == JobStatus.MIGRATING and alices_running_job.migrations.get().notice_seconds
    bid = Bid.objects.get(job=bobs_job)
    assert (bid.won_chips, bid.clearing_price) == (1, ALICES_BID)
    api = token_client(bob)
    shown = api.get("/api/v1/bids/").json()["results"][0]
    assert (parse_datetime(shown["reserved_since"]), shown["reserved_charge"]) == (clock.start, "0.00")

    clock.move_to(clock.start + timedelta(seconds=37.4))
    response = api.post(f"/api/v1/jobs/{bobs_job.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"

    owed = cost((37, ALICES_BID))  # 1 chip x 0.80/h x 37 whole seconds from the win
    assert owed == 8222
    assert balance_of(bob) == before - owed
    reservation = SpotReservation.objects.get(bid=bid)
    assert (reservation.chips, reservation.started_at, reservation.ended_at) == (
        1,
        clock.start,
        clock.start + timedelta(seconds=37.4),
    )
    assert (reservation.owed, reservation.amount) == (owed, owed)
    txn = reservation.transaction
    assert (txn.kind, txn.idempotency_key) == ("charge", f"reservation:{reservation.pk}")
    assert f"bid {bid.pk} of job {bobs_job.pk} (rtx-4090)" in txn.memo and "1 chip(s)" in txn.memo
    assert "37 s" in txn.memo
    assert Bid.objects.get(pk=bid.pk).status == BidStatus.CLOSED
    shown = api.get(f"/api/v1/bids/{bid.pk}/").json()
    assert (shown["reserved_since"], shown["reserved_charge"]) == (None, "0.008222")
    client.force_login(bob)
    assert "¥0.008222" in client.get(reverse("bids")).content.decode()


def test_a_job_that_takes_up_its_chips_pays_the_reservation_then_the_allocation_with_no_second_twice(
    alices_running_job, bob, clock
):
    bobs_job = bob_outbids_alice(alices_running_job, bob)
    before = balance_of(bob)

    clock.move_to(clock.start + timedelta(seconds=18))
    continue_migration(alices_running_job.pk)  # her ranks have checkpointed and left the chip
    schedule(bobs_job.pk)

    bobs_job.refresh_from_db()
    allocation = bobs_job.allocations.get()
    assert bobs_job.status == JobStatus.PROVISIONING and allocation.started_at == clock.start + timedelta(seconds=18)
    reservation = SpotReservation.objects.get(job=bobs_job)
    assert reservation.ended_at == allocation.started_at  # where one stops billing, the other starts
    assert reservation.amount == cost((18, ALICES_BID))
    assert balance_of(bob) == before - reservation.amount

    charge_allocations([allocation.pk], clock.start + timedelta(seconds=45))
    assert line_charged(allocation) == cost((27, ALICES_BID))
    assert reservation.amount + line_charged(allocation) == cost((45, ALICES_BID))  # one integral over [won, end)
    assert balance_of(bob) == before - cost((45, ALICES_BID))
    assert SpotReservation.objects.filter(job=bobs_job).count() == 1  # later clearings reserve nothing more
    assert SpotReservation.objects.filter(job=alices_running_job).count() == 0


def test_a_lapse_charges_the_span_up_to_the_lapse(alices_running_job, bob, clock):
    bobs_job = bob_outbids_alice(alices_running_job, bob)
    continue_migration(alices_running_job.pk)
    before = balance_of(bob)

    lapse = clock.start + timedelta(seconds=take_up_seconds() + 1)
    Job.objects.filter(pk=alices_running_job.pk).update(next_plan_at=lapse + timedelta(seconds=60))  # backing off
    clock.move_to(lapse)
    clear_chip_type(rtx_4090().pk)

    bid = Bid.objects.get(job=bobs_job)
    assert (bid.status, bid.won_chips) == (BidStatus.LAPSED, 0)
    reservation = SpotReservation.objects.get(bid=bid)
    assert (reservation.started_at, reservation.ended_at) == (clock.start, lapse)
    assert reservation.amount == cost((take_up_seconds() + 1, ALICES_BID))
    assert balance_of(bob) == before - reservation.amount

    # The chip went back to the market and alice's bid won it: it is kept (and billed) for her from
    # the lapse, and her job is planned at the next pass instead of after its backoff.
    alices_job = Job.objects.get(pk=alices_running_job.pk)
    assert alices_job.next_plan_at == lapse
    assert SpotReservation.objects.get(job=alices_job, ended_at__isnull=True).started_at == lapse
    clock.move_to(lapse + timedelta(seconds=9))
    schedule(alices_job.pk)
    alices_job.refresh_from_db()
    assert alices_job.status == JobStatus.PROVISIONING
    assert SpotReservation.objects.get(job=alices_job).amount == cost((9, 500_000))  # alone, she pays the floor
    assert balance_of(bob) == before - reservation.amount  # nothing after the lapse


def test_a_price_change_mid_span_is_billed_per_second_at_each_price(alices_running_job, bob, clock):
    bobs_job = bob_outbids_alice(alices_running_job, bob)
    before = balance_of(bob)
    # The operator raises the RTX 4090 spot floor to 1.00 ten seconds after the win: the spot price
    # in force is never below the floor, so from then on the reserved chip costs 1.00/h.
    Price.objects.create(
        chip_type=rtx_4090(),
        on_demand_per_hour=1_200_000,
        spot_floor_per_hour=1_000_000,
        effective_at=clock.start + timedelta(seconds=10),
    )
    clock.move_to(clock.start + timedelta(seconds=20))
    clear_chip_type(rtx_4090().pk)  # the market clears at the new floor; bob still wins the chip
    assert SpotReservation.objects.get(job=bobs_job).ended_at is None

    clock.move_to(clock.start + timedelta(seconds=30))
    bid = Bid.objects.get(job=bobs_job)
    response = token_client(bob).post(f"/api/v1/bids/{bid.pk}/cancel/")

    assert response.status_code == 200
    reservation = SpotReservation.objects.get(bid=bid)
    owed = cost((10, ALICES_BID), (20, 1_000_000))
    assert owed == 7778  # (0.80 x 10 s + 1.00 x 20 s) / 3600 s, rounded once
    assert (reservation.owed, reservation.amount) == (owed, owed)
    assert balance_of(bob) == before - owed
    assert response.json()["reserved_charge"] == "0.007778"


def test_retrying_a_close_charges_once(alices_running_job, bob, clock):
    bobs_job = bob_outbids_alice(alices_running_job, bob)
    bid = Bid.objects.get(job=bobs_job)
    before = balance_of(bob)

    clock.move_to(clock.start + timedelta(seconds=20))
    with transaction.atomic():
        [reservation] = end_bid_reservations([bid.pk], timezone.now())
    charged = cost((20, ALICES_BID))
    assert reservation.amount == charged and balance_of(bob) == before - charged

    clock.move_to(clock.start + timedelta(seconds=60))
    with transaction.atomic():
        assert end_bid_reservations([bid.pk], timezone.now()) == []  # already ended: nothing to end again
    # The same span charged again (a retry that didn't see the end): its key answers with the first charge.
    span = ReservedSpan(
        key=f"reservation:{reservation.pk}",
        owner_id=bob.pk,
        chip_type_id=rtx_4090().pk,
        chips=1,
        started_at=reservation.started_at,
        ended_at=reservation.ended_at,
        label="a retry",
    )
    with transaction.atomic():
        [again] = charge_reserved_spans([span], timezone.now())
    assert (again.charged, again.transaction.pk) == (charged, reservation.transaction_id)
    assert Transaction.objects.filter(idempotency_key=f"reservation:{reservation.pk}").count() == 1
    assert balance_of(bob) == before - charged


def test_a_wallet_that_cannot_cover_its_reserved_chips_is_charged_its_balance_and_never_goes_negative(
    alices_running_job, bob, clock
):
    bobs_job = bob_outbids_alice(alices_running_job, bob)
    # Bob spends his credit elsewhere meanwhile: 0.0001 is left.
    adjust_credit(bob, 100 - balance_of(bob), reason="spent elsewhere", actor=None, key="test-drain")
    assert balance_of(bob) == 100

    clock.move_to(clock.start + timedelta(seconds=37))
    token_client(bob).post(f"/api/v1/jobs/{bobs_job.pk}/cancel/")

    reservation = SpotReservation.objects.get(job=bobs_job)
    assert (reservation.owed, reservation.amount) == (cost((37, ALICES_BID)), 100)
    assert balance_of(bob) == 0


def test_a_clearing_racing_a_cancel_keeps_nothing_for_the_cancelled_bid(alices_running_job, bob):
    """The clearing locks the bids it reads: one that started before the cancel committed re-reads it as cancelled."""
    bid = Bid.objects.get(job=bob_outbids_alice(alices_running_job, bob))
    cancelled, commit = threading.Event(), threading.Event()

    def cancel() -> None:
        try:
            with transaction.atomic():
                cancel_bid(bid)
                cancelled.set()
                commit.wait(10)
        finally:
            connection.close()

    def clear() -> None:
        try:
            clear_chip_type(rtx_4090().pk)
        finally:
            connection.close()

    canceller = threading.Thread(target=cancel)
    canceller.start()
    assert cancelled.wait(10)
    clearing = threading.Thread(target=clear)
    clearing.start()
    clearing.join(1)
    assert clearing.is_alive()  # waiting for the cancel to commit
    commit.set()
    canceller.join(10)
    clearing.join(10)

    assert not clearing.is_alive()
    assert Bid.objects.get(pk=bid.pk).status == BidStatus.CANCELLED
    [reservation] = SpotReservation.objects.filter(bid=bid)  # the one from the win, ended by the cancel
    assert reservation.ended_at is not None

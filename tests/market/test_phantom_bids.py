"""A bid is demand only when its job can run on those chips (docs/RELIABILITY.md #26).

Alice runs a spot job on the only spot RTX 4090. Bob bids far above her from jobs that could never
use that chip (an on-demand job, a job picked other chips, a model too big for it, a job bound to
other chip types, a stopping job, a job running elsewhere): she keeps her chip. Bob's legitimate
bid still reclaims it with notice, and his job is then placed and billed; a bid that wins chips
its job never takes up lapses, and the chips go back.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import SpotPrice
from billing.services.ledger import balance_of
from billing.services.meter import charge_allocations
from fleet.choices import AllocationMode, JobStatus
from fleet.models import Allocation, ChipType, Job
from market.models import Bid, BidStatus
from market.services.bids import change_bid, place_bid
from market.services.clearing import clear_chip_type, take_up_seconds
from tests.support.accounts import token_client
from tests.support.lines import line_charged
from tests.support.spot import job_spec, online_node, spot_job
from workers.models import AgentCommand
from workers.services.lifecycle import resume as continue_migration
from workers.services.scheduling import schedule, schedule_waiting_jobs

# The market clears after each commit; its follow-up tasks run inline.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]


def rtx_4090() -> ChipType:
    return ChipType.objects.get(slug="rtx-4090")


PHANTOM_JOBS = {
    "an on-demand job": {},
    "a spot job picked other chips": {"spot": True, "chip_counts": {"tpu-v5e": 1}},
    "a spot job whose model fits no lone RTX 4090": {
        "spot": True,
        "chip_counts": {"rtx-4090": 1},
        "model_name": "llama-2-7b",
    },
    "a spot job bound to the chips of its plan": {
        "spot": True,
        "allow_other_chips": False,
        "plan": {"ranks": [{"chip": "tpu-v5e", "node_id": 1, "micro_batch": 4}], "global_batch": 4},
    },
    "a stopping spot job": {"spot": True, "status": JobStatus.STOPPING},
}


@pytest.mark.parametrize("kind", PHANTOM_JOBS)
def test_a_phantom_bid_evicts_nobody(alices_running_job, bob, kind):
    """Even a bid already in the book (placed before its job changed) is no demand if its job can't use the chips."""
    bobs_job = Job.objects.create(owner=bob, **job_spec(spot_bid_per_hour=5_000_000, **PHANTOM_JOBS[kind]))
    phantom = Bid.objects.create(
        owner=bob,
        job=bobs_job,
        chip_type=rtx_4090(),
        chips=1,
        max_price_per_hour=5_000_000,
        placed_at=timezone.now() - timedelta(hours=1),  # earlier than alice's, and far above her bid
    )

    result = clear_chip_type(rtx_4090().pk)

    alices_running_job.refresh_from_db()
    assert alices_running_job.status == JobStatus.PROVISIONING and not alices_running_job.migrations.exists()
    assert not AgentCommand.objects.filter(job=alices_running_job, type="stop").exists()
    assert Bid.objects.get(pk=phantom.pk).won_chips == 0
    assert Bid.objects.get(job=alices_running_job).won_chips == 1
    assert result.demand == 1 and result.price == 500_000  # only alice's chip is asked for: the floor


def test_a_running_job_bidding_for_chips_it_does_not_hold_wins_none(alices_running_job, bob):
    online_node("spot-910b", "ascend-910b")
    bobs_job = spot_job(bob, "1.00")
    bobs_job.refresh_from_db()
    assert bobs_job.status == JobStatus.PROVISIONING and bobs_job.allocations.get().chip_type.slug == "ascend-910b"

    # Accepted (it says what the job pays for RTX 4090s should it move), but a running job doesn't grow.
    bid = place_bid(bob, job=bobs_job, chip_type=rtx_4090(), chips=1, max_price_per_hour=5_000_000)

    alices_running_job.refresh_from_db()
    assert alices_running_job.status == JobStatus.PROVISIONING and not alices_running_job.migrations.exists()
    assert Bid.objects.get(pk=bid.pk).won_chips == 0
    assert SpotPrice.objects.filter(chip_type=rtx_4090()).latest("at").demand == 1


@pytest.mark.parametrize(
    ("kind", "field", "words"),
    [
        ("an on-demand job", "job", "is not a spot job"),
        ("a spot job picked other chips", "chip", "runs only on the chips picked for it (1× tpu-v5e)"),
        ("a spot job whose model fits no lone RTX 4090", "chip", "llama-2-7b fits a rtx-4090 chip (24 GiB) at no"),
        ("a spot job bound to the chips of its plan", "chip", "may not change chip types: it runs on tpu-v5e"),
        ("a stopping spot job", "job", "is stopping"),
    ],
)
def test_a_bid_its_job_could_never_use_is_refused_naming_the_field(alices_running_job, bob, kind, field, words):
    bobs_job = Job.objects.create(owner=bob, **job_spec(spot_bid_per_hour=5_000_000, **PHANTOM_JOBS[kind]))
    body = {"job": bobs_job.pk, "chip": "rtx-4090", "chips": 1, "max_price": "5.00"}

    response = token_client(bob).post("/api/v1/bids/", body, format="json")

    assert response.status_code == 400, response.json()
    assert words in " ".join(response.json()["errors"][field])
    assert not Bid.objects.filter(owner=bob).exists()
    alices_running_job.refresh_from_db()
    assert not alices_running_job.migrations.exists()


def test_the_bids_page_offers_only_live_spot_jobs(client, alices_running_job, bob):
    on_demand = Job.objects.create(owner=bob, **job_spec())
    client.force_login(bob)

    response = client.post(
        reverse("bids"), {"job": on_demand.pk, "chip": "rtx-4090", "chips": "1", "max_price": "5.00"}
    )

    assert "Choose one of your spot jobs that hasn&#x27;t finished." in response.content.decode()
    assert not Bid.objects.filter(owner=bob).exists()


def test_a_bid_for_more_chips_than_were_picked_is_refused_on_chips(alices_running_job, bob):
    bobs_job = Job.objects.create(owner=bob, **job_spec(spot=True, chip_counts={"rtx-4090": 1}))
    body = {"job": bobs_job.pk, "chip": "rtx-4090", "chips": 4, "max_price": "5.00"}

    response = token_client(bob).post("/api/v1/bids/", body, format="json")

    assert response.status_code == 400
    assert "runs on 1 rtx-4090 chip(s) picked for it; 4 asked" in response.json()["errors"]["chips"][0]


def test_a_legitimate_bid_still_evicts_with_notice_and_its_job_is_placed_and_billed(alices_running_job, bob):
    bobs_job = spot_job(bob, "0.60")  # below alice's bid: it waits for chips
    bobs_job.refresh_from_db()
    assert bobs_job.status == JobStatus.QUEUED

    response = token_client(bob).post(
        "/api/v1/bids/", {"job": bobs_job.pk, "chip": "rtx-4090", "chips": 1, "max_price": "1.20"}, format="json"
    )
    assert response.status_code == 201, response.json()

    alices_running_job.refresh_from_db()
    migration = alices_running_job.migrations.get()
    assert alices_running_job.status == JobStatus.MIGRATING and migration.reason == "outbid"
    assert migration.notice_seconds == 30
    assert AgentCommand.objects.get(job=alices_running_job, type="stop").payload["checkpoint"] is True
    assert Bid.objects.get(job=bobs_job).won_chips == 1

    continue_migration(alices_running_job.pk)  # her ranks have checkpointed and left the chip
    schedule_waiting_jobs()  # chips freed up: bob's job is due at once, whatever its backoff

    bobs_job.refresh_from_db()
    allocation = bobs_job.allocations.get()
    assert bobs_job.status == JobStatus.PROVISIONING
    assert (allocation.node.hostname, allocation.mode) == ("spot-4090", AllocationMode.SPOT)
    alices_running_job.refresh_from_db()
    assert alices_running_job.status == JobStatus.QUEUED  # the chip her bid lost is not hers to take back

    before = balance_of(bob)
    charge_allocations([allocation.pk], allocation.started_at + timedelta(seconds=60))
    # one minute at the clearing price, the highest losing bid (alice's 0.80/h)
    assert line_charged(allocation) == round(800_000 / 60)
    assert balance_of(bob) == before - line_charged(allocation)


def test_a_bid_whose_job_never_takes_up_the_chips_lapses_and_the_chips_go_back(alices_running_job, bob):
    bobs_job = Job.objects.create(owner=bob, **job_spec(spot=True, spot_bid_per_hour=600_000))  # never scheduled
    place_bid(bob, job=bobs_job, chip_type=rtx_4090(), chips=1, max_price_per_hour=1_200_000)
    alices_running_job.refresh_from_db()
    assert alices_running_job.status == JobStatus.MIGRATING  # the bid was legitimate: alice had notice
    continue_migration(alices_running_job.pk)  # she left; the chip is reserved for bob's bid meanwhile
    alices_running_job.refresh_from_db()
    assert alices_running_job.status == JobStatus.QUEUED

    # Losing the chip for a while (lowered below alice, raised again) doesn't restart the clock.
    bid = Bid.objects.get(job=bobs_job)
    started = bid.waiting_since
    assert started is not None
    change_bid(bid, max_price_per_hour=550_000)
    assert Bid.objects.get(pk=bid.pk).won_chips == 0
    change_bid(bid, max_price_per_hour=1_200_000)
    assert Bid.objects.get(pk=bid.pk).won_chips == 1 and Bid.objects.get(pk=bid.pk).waiting_since == started
    later = timezone.now() + timedelta(seconds=take_up_seconds() + 1)
    clear_chip_type(rtx_4090().pk, now=later)

    bid.refresh_from_db()
    assert (bid.status, bid.won_chips) == (BidStatus.LAPSED, 0)
    response = token_client(bob).post(
        "/api/v1/bids/", {"job": bobs_job.pk, "chip": "rtx-4090", "chips": 1, "max_price": "2.00"}, format="json"
    )
    assert response.status_code == 400 and "lapsed" in response.json()["errors"]["chip"][0]

    schedule(alices_running_job.pk)
    alices_running_job.refresh_from_db()
    assert alices_running_job.status == JobStatus.PROVISIONING
    assert Allocation.objects.open().get(job=alices_running_job).node.hostname == "spot-4090"

"""A bid change that would move a running job asks first; the job header shows the bid in force; warnings.

The job runs for real through the scheduler (placed on a spot RTX 4090, with an on-demand TPU v5e free
to move to), so the consequence the API and the bids page describe is the planner's own answer.
"""

from __future__ import annotations

import pytest

from fleet.choices import JobStatus
from fleet.models import ChipType, Job
from market.models import Bid, BidStatus
from market.services.bids import place_bid
from tests.support.accounts import token_client
from tests.workers.services.test_spot_migration import spot_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]


@pytest.fixture
def running(enroll, fund, alice, bob):
    """Alice's job on the one spot RTX 4090 at a bid of 1.00; bob's waiting job bids 0.90 for that chip."""
    fund(alice, "100")
    fund(bob, "100")
    enroll("spot-4090", "rtx-4090", chips=1, spot=True)
    enroll("tpu-1", "tpu-v5e", chips=1)
    job = spot_job(alice, "1.00", allow_on_demand=True)
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING and job.allocations.get().mode == "spot"
    rival = Job.objects.create(
        owner=bob,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=10,
        max_budget_per_hour=28_000_000,
        spot=True,
        spot_bid_per_hour=900_000,
        status=JobStatus.QUEUED,
    )
    place_bid(bob, job=rival, chip_type=ChipType.objects.get(slug="rtx-4090"), chips=1, max_price_per_hour=900_000)
    return job


def test_cancelling_the_bid_of_a_running_job_is_refused_with_409_naming_where_it_would_go(alice, running):
    bid = Bid.objects.get(job=running)
    response = token_client(alice).post(f"/api/v1/bids/{bid.pk}/cancel/", {}, format="json")

    assert response.status_code == 409, response.json()
    body = response.json()
    assert body["code"] == "confirm_required"
    assert f"moves job {running.pk}" in body["detail"] and "Send confirm=true" in body["detail"]
    assert body["move"]["chips_lost"] == 1 and body["move"]["to"] == "1 × Google TPU v5e (on-demand)"
    assert body["move"]["price_per_hour_after"] == "2.80"
    bid.refresh_from_db()
    running.refresh_from_db()
    assert bid.status == BidStatus.ACTIVE and running.status == JobStatus.PROVISIONING  # nothing changed

    confirmed = token_client(alice).post(f"/api/v1/bids/{bid.pk}/cancel/?confirm=true")
    assert confirmed.status_code == 200 and confirmed.json()["status"] == "cancelled"
    running.refresh_from_db()
    assert running.status == JobStatus.MIGRATING


def test_lowering_a_bid_below_a_rival_asks_for_confirmation_raising_it_does_not(alice, running):
    bid = Bid.objects.get(job=running)
    api = token_client(alice)

    lowered = api.patch(f"/api/v1/bids/{bid.pk}/", {"max_price": "0.85"}, format="json")
    assert lowered.status_code == 409
    assert "loses all 1 of its NVIDIA RTX 4090 spot chips" in lowered.json()["detail"]
    assert Bid.objects.get(pk=bid.pk).max_price_per_hour == 1_000_000

    raised = api.patch(f"/api/v1/bids/{bid.pk}/", {"max_price": "1.10"}, format="json")
    assert raised.status_code == 200 and raised.json()["warnings"] == []

    confirmed = api.patch(f"/api/v1/bids/{bid.pk}/", {"max_price": "0.85", "confirm": True}, format="json")
    assert confirmed.status_code == 200 and confirmed.json()["max_price"] == "0.85"
    running.refresh_from_db()
    assert running.status == JobStatus.MIGRATING


def test_a_bid_above_on_demand_is_accepted_with_a_warning(alice, running):
    bid = Bid.objects.get(job=running)
    response = token_client(alice).patch(f"/api/v1/bids/{bid.pk}/", {"max_price": "1.50"}, format="json")
    assert response.status_code == 200
    (warning,) = response.json()["warnings"]
    assert "above the NVIDIA RTX 4090 on-demand price of ¥1.20/h" in warning


def test_the_bids_page_asks_before_a_cancel_moves_the_job_and_the_header_shows_the_bid_in_force(client, alice, running):
    bid = Bid.objects.get(job=running)
    client.force_login(alice)

    asked = client.post(f"/bids/{bid.pk}/cancel/")
    assert asked.status_code == 200
    page = asked.content.decode()
    assert 'data-testid="bid-confirm"' in page and "Cancel bid and move job" in page
    assert "1 × Google TPU v5e (on-demand)" in page
    assert Bid.objects.get(pk=bid.pk).status == BidStatus.ACTIVE

    client.post(f"/bids/{bid.pk}/change/", {"max_price": "1.10"})
    header = client.get(f"/jobs/{running.pk}/").content.decode()
    spot_line = header[header.index('data-testid="job-spot"') :][:400]
    assert "1.10" in spot_line and "1.00" not in spot_line  # the raised bid, not the launch bid

    client.post(f"/bids/{bid.pk}/cancel/", {"confirm": "1"})
    assert Bid.objects.get(pk=bid.pk).status == BidStatus.CANCELLED  # confirmed: no second question

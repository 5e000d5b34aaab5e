"""Bids and spot price history over the API: placing, raising, lowering, cancelling, and bad input."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from billing.models import SpotPrice
from fleet.models import ChipType, Job
from market.models import Bid
from market.services.clearing import clear_chip_type
from tests.support.accounts import token_client

pytestmark = pytest.mark.django_db(transaction=True)  # the market clears after each commit


@pytest.fixture(autouse=True)
def clearing_inline(monkeypatch):
    from market.tasks import clear_market

    monkeypatch.setattr("market.tasks.clear_market.delay", lambda chip_type_id=None: clear_market(chip_type_id))


@pytest.fixture
def alices_spot_job(alice, fund, enroll):
    fund(alice, "100")
    enroll("spot-1", "rtx-4090", chips=4, spot=True)
    return spot_job(alice)


def spot_job(owner) -> Job:
    """A queued spot job: only a spot job's bid is demand in the auction."""
    return Job.objects.create(
        owner=owner,
        model_name="llama-tiny",
        per_device_batch_size=4,
        max_steps=10,
        max_budget_per_hour=28_000_000,
        spot=True,
        spot_bid_per_hour=900_000,
    )


def bid_body(for_job, **changes):
    return {"job": for_job.pk, "chip": "rtx-4090", "chips": 2, "max_price": "0.90", **changes}


def test_a_bid_enters_the_auction_at_once_and_wins_free_chips_at_the_floor(alice, alices_spot_job):
    response = token_client(alice).post("/api/v1/bids/", bid_body(alices_spot_job), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["chip"], body["chips"], body["max_price"], body["status"]) == ("rtx-4090", 2, "0.90", "active")
    bid = Bid.objects.get(pk=body["id"])
    assert bid.won_chips == 2 and bid.clearing_price == 500_000  # 2 of 4 spot chips wanted: the floor
    listed = token_client(alice).get("/api/v1/bids/").json()["results"]
    assert [b["id"] for b in listed] == [bid.pk] and listed[0]["won_chips"] == 2


def test_raising_and_lowering_a_bid_keeps_its_place_in_time(alice, alices_spot_job):
    api = token_client(alice)
    bid_id = api.post("/api/v1/bids/", bid_body(alices_spot_job), format="json").json()["id"]
    placed_at = Bid.objects.get(pk=bid_id).placed_at
    raised = api.patch(f"/api/v1/bids/{bid_id}/", {"max_price": "1.10"}, format="json")
    assert raised.status_code == 200 and raised.json()["max_price"] == "1.10"
    lowered = api.patch(f"/api/v1/bids/{bid_id}/", {"max_price": "0.70", "chips": 1}, format="json")
    assert lowered.json()["max_price"] == "0.70" and lowered.json()["chips"] == 1
    assert Bid.objects.get(pk=bid_id).placed_at == placed_at


def test_the_highest_bids_win_when_demand_exceeds_capacity_and_all_pay_the_highest_losing_bid(
    alice, bob, fund, alices_spot_job
):
    fund(bob, "100")
    bobs_job = spot_job(bob)
    token_client(alice).post("/api/v1/bids/", bid_body(alices_spot_job, chips=3, max_price="0.90"), format="json")
    token_client(bob).post("/api/v1/bids/", bid_body(bobs_job, chips=2, max_price="1.20"), format="json")
    alice_bid, bob_bid = Bid.objects.get(job=alices_spot_job), Bid.objects.get(job=bobs_job)
    assert (bob_bid.won_chips, alice_bid.won_chips) == (2, 2)  # alice's bid is the marginal one: filled in part
    assert bob_bid.clearing_price == alice_bid.clearing_price == 900_000
    history = APIClient().get("/api/v1/prices/history/?chip=rtx-4090").json()["results"]
    assert history[0]["price_per_hour"] == "0.90" and history[0]["demand"] == 5 and history[0]["capacity"] == 4


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"max_price": "0.10"}, "max_price", "below the rtx-4090 spot floor of 0.50"),
        ({"chips": 50}, "chips", "has 12 spot-eligible"),
        ({"chip": "tpu-v9"}, "chip", "Unknown chip type 'tpu-v9'"),
        ({"max_price": "abc"}, "max_price", "valid number"),
        ({"chips": 0}, "chips", "greater than or equal to 1"),
        ({"job": 999999}, "job", "not found"),
        ({"max_price": "900", "chips": 4}, "balance", "can't hold this bid"),
    ],
)
def test_bad_bids_are_refused_naming_the_field_and_nothing_is_written(alice, alices_spot_job, changes, field, words):
    response = token_client(alice).post("/api/v1/bids/", bid_body(alices_spot_job, **changes), format="json")
    assert response.status_code == 400, response.json()
    assert words in " ".join(response.json()["errors"][field])
    assert not Bid.objects.exists() and not SpotPrice.objects.exists()


def test_a_cancelled_bid_cannot_be_raised(alice, alices_spot_job):
    api = token_client(alice)
    bid_id = api.post("/api/v1/bids/", bid_body(alices_spot_job), format="json").json()["id"]
    assert api.post(f"/api/v1/bids/{bid_id}/cancel/").json()["status"] == "cancelled"
    response = api.patch(f"/api/v1/bids/{bid_id}/", {"max_price": "2.00"}, format="json")
    assert response.status_code == 400
    assert "cancelled" in response.json()["errors"]["status"][0]
    assert Bid.objects.get(pk=bid_id).max_price_per_hour == 900_000


def test_another_users_bid_is_not_found_and_not_listed(alice, bob, alices_spot_job):
    bid_id = token_client(alice).post("/api/v1/bids/", bid_body(alices_spot_job), format="json").json()["id"]
    other = token_client(bob)
    assert other.get(f"/api/v1/bids/{bid_id}/").status_code == 404
    assert other.patch(f"/api/v1/bids/{bid_id}/", {"max_price": "0.60"}, format="json").status_code == 404
    assert other.post(f"/api/v1/bids/{bid_id}/cancel/").status_code == 404
    assert other.get("/api/v1/bids/").json()["results"] == []
    # and bob can't bid for alice's job
    response = other.post("/api/v1/bids/", bid_body(alices_spot_job), format="json")
    assert response.status_code == 400 and "not found" in response.json()["errors"]["job"][0]


def test_price_history_needs_a_known_chip(db):
    assert "chip" in APIClient().get("/api/v1/prices/history/").json()["errors"]
    assert "Unknown chip type" in APIClient().get("/api/v1/prices/history/?chip=nope").json()["errors"]["chip"][0]


def test_a_spot_job_needs_a_bid_and_a_bid_needs_a_spot_job(alice, fund, catalog):
    fund(alice)
    api = token_client(alice)
    spec = {"model": "llama-tiny", "per_device_batch_size": 4, "max_steps": 10, "max_budget": "28"}
    assert "bid" in api.post("/api/v1/jobs/", {**spec, "spot": True}, format="json").json()["errors"]
    assert "bid" in api.post("/api/v1/jobs/", {**spec, "bid": "0.9"}, format="json").json()["errors"]
    assert not Job.objects.exists()


def test_clearing_with_no_spot_nodes_and_no_bids_records_nothing(catalog):
    clear_chip_type(ChipType.objects.get(slug="h100-80g").pk)
    assert not SpotPrice.objects.exists()

"""Bid advice and confirmed bid changes through the SDK and the CLI, against a live server."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import starverse
from django.utils import timezone

from billing.models import SpotPrice
from fleet.choices import JobStatus
from fleet.models import ChipType, Job, Pool
from market.models import Bid, BidStatus
from market.services.bids import place_bid
from tests.sdk.test_cli import starverse as run_starverse
from tests.workers.services.test_spot_migration import spot_job
from workers.models import EnrollmentToken
from workers.services.enrollment import enroll_node

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ("STARVERSE_URL", "STARVERSE_API_KEY", "STARVERSE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def clearing_history(catalog):
    """12 h of RTX 4090 clearings: at or below 0.80 for 2 h, above for 3 h, at or below for 4 h, above for 3 h."""
    chip = ChipType.objects.get(slug="rtx-4090")
    now = timezone.now()
    for ago, cents in [(12, 50), (10, 90), (7, 60), (5, 80), (3, 100)]:
        SpotPrice.objects.create(
            chip_type=chip,
            at=now - timedelta(hours=ago),
            price_per_hour=cents * 10_000,
            floor_per_hour=500_000,
            capacity=8,
            demand=4,
            allocated=4,
        )


def enroll(hostname: str, chip: str, spot: bool) -> None:
    _, raw = EnrollmentToken.issue(Pool.objects.get(chip_type__slug=chip), chips=1)
    enroll_node(
        enrollment_token=raw,
        hostname=hostname,
        chip_type=chip,
        chips=1,
        simulated=True,
        spot_eligible=spot,
        address="127.0.0.1",
    )


@pytest.fixture
def running_bid(catalog, alice, bob, fund) -> Bid:
    """Alice's job runs on the one spot RTX 4090 under its bid; an on-demand TPU v5e is free to move to."""
    fund(alice, "100")
    enroll("spot-4090", "rtx-4090", spot=True)
    enroll("tpu-1", "tpu-v5e", spot=False)
    job = spot_job(alice, "1.00", allow_on_demand=True)
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING
    # Bob's waiting job bids 0.90 for that chip: once alice's bid goes, the chip is his.
    fund(bob, "100")
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
    return Bid.objects.get(job=job)


def test_the_sdk_gives_bid_advice_from_the_price_history(live_server, alice, token_for, clearing_history):
    client = starverse.Client(live_server.url, token_for(alice), backoff=0.01)
    advice = client.bid_advice("rtx-4090", "0.80")

    assert (advice["bid"], advice["floor"], advice["on_demand_price"]) == ("0.80", "0.50", "1.20")
    assert advice["expected_hours"] == pytest.approx(3.0, abs=0.01) and advice["runs"] == 2
    assert advice["winning_share"] == pytest.approx(0.5, abs=0.01)
    assert advice["history_hours"] == pytest.approx(12, abs=0.01)
    assert [point["bid"] for point in advice["curve"]][:2] == ["0.50", "0.60"]
    assert client.bid_advice("tpu-v5e", "1.00")["summary"].startswith("No history yet")
    assert "above the NVIDIA RTX 4090 on-demand price" in client.bid_advice("rtx-4090", "2.00")["warnings"][0]
    with pytest.raises(starverse.ValidationError, match="Unknown chip type 'nope'"):
        client.bid_advice("nope", "1")


def test_the_sdk_needs_confirm_to_cancel_a_bid_that_moves_a_running_job(live_server, alice, token_for, running_bid):
    client = starverse.Client(live_server.url, token_for(alice), backoff=0.01)
    with pytest.raises(starverse.MoveNotConfirmed) as refused:
        client.cancel_bid(running_bid.pk)
    assert refused.value.status == 409 and refused.value.move["to"] == "1 × Google TPU v5e (on-demand)"
    assert Bid.objects.get(pk=running_bid.pk).status == BidStatus.ACTIVE

    assert client.cancel_bid(running_bid.pk, confirm=True)["status"] == "cancelled"


def test_the_cli_prints_bid_advice_and_asks_for_confirm(
    capsys, monkeypatch, live_server, alice, token_for, clearing_history
):
    monkeypatch.setenv("STARVERSE_URL", live_server.url)
    monkeypatch.setenv("STARVERSE_API_KEY", token_for(alice))

    code, out, _ = run_starverse(capsys, "bid-advice", "rtx-4090", "--bid", "0.8")
    assert code == 0 and "About 3 h uninterrupted" in out and "rtx-4090" in out
    code, out, _ = run_starverse(capsys, "bid-advice", "rtx-4090", "--bid", "0.8", "--json")
    assert code == 0 and json.loads(out)["runs"] == 2


def test_the_cli_cancel_of_a_job_moving_bid_needs_confirm(
    capsys, monkeypatch, live_server, alice, token_for, running_bid
):
    monkeypatch.setenv("STARVERSE_URL", live_server.url)
    monkeypatch.setenv("STARVERSE_API_KEY", token_for(alice))

    code, _, err = run_starverse(capsys, "bid", "cancel", str(running_bid.pk))
    assert code != 0 and "--confirm" in err and "TPU v5e" in err
    assert Bid.objects.get(pk=running_bid.pk).status == BidStatus.ACTIVE

    code, out, _ = run_starverse(capsys, "bid", "cancel", str(running_bid.pk), "--confirm", "--json")
    assert code == 0 and json.loads(out)["status"] == "cancelled"

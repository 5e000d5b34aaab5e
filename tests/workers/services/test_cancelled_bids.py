"""Cancelling a job's last bid for a chip type stops renting that type: the re-plan neither bids for it
again nor puts the job back on it (spot or on-demand), the confirmation says so, and the job header
drops the cancelled bid. A new bid for the type, placed by hand, takes the cancel back.

Before, the re-plan bid again at the job's launch price and the job went back onto the same TPU.
"""

from __future__ import annotations

import pytest

from fleet.choices import AllocationMode, JobStatus
from fleet.models import ChipType, Job
from market.models import Bid, BidStatus
from market.services.bids import cancel_bid, place_bid
from market.services.moves import move_of_cancel
from tests.support.accounts import token_client
from tests.workers.services.test_spot_migration import _t, metric, report, spot_job
from workers.services.scheduling import schedule

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]


@pytest.fixture
def on_tpu(enroll, fund, alice):
    """Alice's spot job on the one spot TPU v5e (bid 3.00, may fall back to on-demand)."""
    fund(alice, "100")
    enroll("spot-v5e", "tpu-v5e", chips=1, spot=True)
    job = spot_job(alice, "3.00", allow_on_demand=True)
    job.refresh_from_db()
    assert job.allocations.get().chip_type.slug == "tpu-v5e", job.status_reason
    return job


def tpu_bid(job: Job) -> Bid:
    return Bid.objects.active().get(job=job, chip_type__slug="tpu-v5e")


def checkpoint_and_leave(job: Job) -> None:
    """The ranks on the old chips checkpoint on notice and exit, as the agent reports it."""
    node = job.allocations.get(epoch=job.epoch).node
    path = f"store:checkpoints/job-{job.pk}/step-5"
    stop = {"kind": "checkpoint", "rank": 0, "step": 5, "path": path, "seconds": 0.1, "stopping": True}
    report(job, node, metric(0, 5), {**stop, "t": _t()}, {"kind": "exit", "rank": 0, "code": 0, "t": _t()})


def test_after_its_tpu_bid_is_cancelled_the_job_is_not_put_back_on_the_tpu(on_tpu, enroll):
    cancel_bid(tpu_bid(on_tpu))
    checkpoint_and_leave(on_tpu)

    on_tpu.refresh_from_db()
    assert on_tpu.status == JobStatus.QUEUED, on_tpu.status_reason  # the TPU is free, but no longer its
    assert not Bid.objects.active().filter(job=on_tpu).exists()
    assert list(Bid.objects.filter(job=on_tpu).values_list("status", flat=True)) == [BidStatus.CANCELLED]

    enroll("gpu-1", "rtx-4090", chips=1)
    schedule(on_tpu.pk)
    on_tpu.refresh_from_db()
    allocation = on_tpu.allocations.get(epoch=on_tpu.epoch)
    assert (allocation.chip_type.slug, allocation.mode) == ("rtx-4090", AllocationMode.ON_DEMAND)


def test_the_confirmation_says_the_job_leaves_the_chip_type_and_where_it_goes(on_tpu, enroll):
    enroll("gpu-1", "rtx-4090", chips=1)

    move = move_of_cancel(tpu_bid(on_tpu))

    assert "is re-planned without Google TPU v5e chips" in move.message
    assert "to 1 × NVIDIA RTX 4090 (on-demand)" in move.message


def test_a_new_bid_for_the_chip_type_takes_the_cancel_back(on_tpu, alice):
    cancel_bid(tpu_bid(on_tpu))
    checkpoint_and_leave(on_tpu)
    tpu = ChipType.objects.get(slug="tpu-v5e")

    place_bid(alice, job=Job.objects.get(pk=on_tpu.pk), chip_type=tpu, chips=1, max_price_per_hour=3_000_000)
    schedule(on_tpu.pk)

    on_tpu.refresh_from_db()
    assert on_tpu.status == JobStatus.PROVISIONING, on_tpu.status_reason
    assert on_tpu.allocations.get(epoch=on_tpu.epoch).chip_type == tpu


def test_the_job_header_drops_the_cancelled_bid(client, on_tpu, alice):
    token_client(alice).post(f"/api/v1/bids/{tpu_bid(on_tpu).pk}/cancel/?confirm=true")
    client.force_login(alice)

    header = client.get(f"/jobs/{on_tpu.pk}/").content.decode()

    spot_line = header[header.index('data-testid="job-spot"') :][:600]
    assert "/chip-h on other chip types; none for Google TPU v5e (cancelled)" in spot_line

"""Spot works on every model the planner can place, not only the catalog's: the market sizes a job's
model as planning resolved it (an upload, LoRA), so its bids are demand on the chips it runs on.

Before, the market knew only catalog names: a `model:<id>` job was "outbid" at the first clearing by
a price below its bid, and its bids were refused as "could never run" on the chip it was running on.
"""

from __future__ import annotations

import pytest

from fleet.choices import AllocationMode, JobStatus
from fleet.models import Job, UploadedModel
from kernel.modelfiles import hfconfig
from kernel.modelspecs import CATALOG
from market.models import Bid
from market.services.bids import change_bid
from market.services.clearing import clear_chip_type
from tests.support.accounts import token_client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]


def uploaded_model(owner, base: str = "llama-tiny") -> UploadedModel:
    """A user's model as the upload check records it (here: a catalog config, uploaded)."""
    config = dict(CATALOG[base].config)
    shape = hfconfig.model_shape(config)
    return UploadedModel.objects.create(
        owner=owner, name="mine", architecture="llama", parameters=shape.parameters, size_bytes=1, config=config,
        shape=shape.as_dict(), store_prefix=f"models/{owner.pk}/mine-{base}",
    )  # fmt: skip


def launch_spot(owner, model: str, **fields) -> Job:
    body = {"model": model, "per_device_batch_size": 4, "max_steps": 100, "max_budget": "28", "spot": True}
    response = token_client(owner).post("/api/v1/jobs/", {**body, "bid": "1.00", **fields}, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


@pytest.fixture
def spot_4090(enroll, fund, alice):
    fund(alice, "100")
    node, _ = enroll("spot-4090", "rtx-4090", chips=1, spot=True)
    return node


def test_a_spot_job_on_an_uploaded_model_keeps_the_chips_its_bid_won(alice, spot_4090):
    job = launch_spot(alice, uploaded_model(alice).reference, allow_on_demand=False)
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING, job.status_reason
    assert job.allocations.get().mode == AllocationMode.SPOT

    clear_chip_type(spot_4090.pool.chip_type_id)

    job.refresh_from_db()
    bid = Bid.objects.get(job=job)
    assert job.status == JobStatus.PROVISIONING and not job.migrations.exists(), job.status_reason
    assert bid.won_chips == 1 and bid.clearing_price < bid.max_price_per_hour


def test_the_bid_of_a_job_on_an_uploaded_model_can_be_raised_on_the_chip_it_runs_on(alice, spot_4090):
    job = launch_spot(alice, uploaded_model(alice).reference, allow_on_demand=False)
    bid = Bid.objects.get(job=job)

    raised = change_bid(bid, max_price_per_hour=1_100_000)

    assert raised.max_price_per_hour == 1_100_000


def test_a_lora_job_on_a_model_too_big_to_train_fully_on_a_chip_is_still_demand_for_it(alice, enroll, fund):
    """LoRA keeps only the adapter's gradients and optimizer state: a 7B model trains on one 24 GiB chip."""
    fund(alice, "1000")
    node, _ = enroll("spot-4090", "rtx-4090", chips=1, spot=True)
    job = launch_spot(
        alice, uploaded_model(alice, "llama-2-7b").reference, mode="lora", seq_len=64, max_budget="100",
        chip_counts={"rtx-4090": 1}, allow_on_demand=False,
    )  # fmt: skip
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING, job.status_reason

    clear_chip_type(node.pool.chip_type_id)

    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING and Bid.objects.get(job=job).won_chips == 1, job.status_reason

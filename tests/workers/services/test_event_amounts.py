"""Event texts give amounts to the cent: a move's "insurance refund ¥0.02", never "insurance refund 0.016667"."""

from __future__ import annotations

import re

import pytest

from fleet.choices import JobEventKind, JobStatus
from market.models import Bid
from market.services.bids import cancel_bid
from tests.workers.services.test_cancelled_bids import checkpoint_and_leave
from tests.workers.services.test_spot_migration import metric, report, spot_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("tasks_run_inline")]


def test_the_resumed_event_names_the_insurance_refund_to_the_cent(enroll, fund, alice):
    fund(alice, "100")
    first, _ = enroll("spot-4090", "rtx-4090", chips=1, spot=True)
    job = spot_job(alice, "0.80", allow_on_demand=True)
    report(job, first, metric(0, 1), metric(0, 5))
    cancel_bid(Bid.objects.get(job=job))
    second, _ = enroll("gpu-910b", "ascend-910b", chips=1)
    checkpoint_and_leave(job)
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING, job.status_reason

    report(job, second, metric(0, 6))

    resumed = job.events.get(kind=JobEventKind.RESUMED).message
    assert re.search(r"insurance refund (¥\d+\.\d\d|<¥0\.01)$", resumed), resumed

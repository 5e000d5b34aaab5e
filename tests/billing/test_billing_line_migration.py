"""Billing migration 0011 groups the allocations billed before it into billing lines: a line's charged
total and chip-seconds are its allocations', those that ended and were billed through their end are
settled, and the open ones are priced from their start by the next tick, what they paid counting
against it. From then on the database makes the line of every new allocation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from billing.models import BillingLine
from billing.services.meter import run_meter
from fleet.choices import AllocationMode, JobStatus
from fleet.models import Allocation
from tests.support.lines import line_of
from tests.support.meter import T0, exact_cost, fund, open_allocation
from tests.support.migrating import latest, migrate

BEFORE = ("billing", "0010_charge_per_billing_line")


@pytest.mark.django_db(transaction=True)
def test_allocations_billed_before_become_lines_and_bill_on_exactly(alice, enroll, planning_job):  # noqa: F811
    fund(alice)
    node, _ = enroll("lines", chips=8)
    job = planning_job(status=JobStatus.RUNNING)
    hour = T0 + timedelta(hours=1)
    ended = open_allocation(job, node, chips=2, ended_at=T0 + timedelta(seconds=90, microseconds=500))
    running = open_allocation(job, node, chips=3)
    spot = open_allocation(job, node, chips=1, mode=AllocationMode.SPOT)
    newest = latest()
    migrate([BEFORE])
    try:  # as the per-allocation meter left them: the ended one billed through its end, the others to 10 min
        for allocation, through in [(ended, 90), (running, 600), (spot, 600)]:
            mark = T0 + timedelta(seconds=through)
            Allocation.objects.filter(pk=allocation.pk).update(
                billed_through=mark, charged_total=exact_cost(allocation, mark)
            )
    finally:
        migrate(newest)

    line = line_of(running)
    assert line == line_of(ended) and BillingLine.objects.count() == 2
    paid = exact_cost(ended, T0 + timedelta(seconds=90)) + exact_cost(running, T0 + timedelta(seconds=600))
    assert (line.charged_total, line.chip_seconds) == (paid, 2 * 90 + 3 * 600)
    assert (line.settled_owed, line.settled_chip_seconds) == (exact_cost(ended, T0 + timedelta(seconds=90)), 2 * 90)
    assert line.billed_through == T0 + timedelta(seconds=600)

    run_meter(hour)  # the open allocations are billed on, up to the hour, exactly
    line.refresh_from_db()
    assert line.charged_total == exact_cost(ended, T0 + timedelta(seconds=90)) + exact_cost(running, hour)
    assert line_of(spot).charged_total == exact_cost(spot, hour)
    # The trigger is back: a new allocation of a job that had none of that kind gets a new line.
    other, _ = enroll("lines-tpu", chip="tpu-v5e", chips=8)
    assert line_of(open_allocation(job, other, chips=1, start=hour)).billed_through == hour

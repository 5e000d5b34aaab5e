"""`manage.py reconcile` finds nothing after normal metering and finds tampering."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.utils import timezone

from billing.models import BillingLine, Charge
from billing.services.meter import run_meter
from fleet.choices import JobStatus
from fleet.models import Allocation
from tests.support.lines import line_of
from tests.support.meter import fund, open_allocation

pytestmark = pytest.mark.django_db


@pytest.fixture
def metered(alice, enroll, planning_job):  # noqa: F811
    fund(alice)
    node, _ = enroll("rec", chips=8)
    job = planning_job(status=JobStatus.RUNNING)
    now = timezone.now()
    allocations = [open_allocation(job, node, now - timedelta(minutes=m, microseconds=m * 1001)) for m in (1, 7, 30)]
    Allocation.objects.filter(pk=allocations[0].pk).update(ended_at=now - timedelta(seconds=20, microseconds=3))
    run_meter(now - timedelta(seconds=10))
    run_meter(now)
    return allocations


def reconcile(lag: int = 60) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("reconcile", f"--lag={lag}", stdout=out)
    except SystemExit as exit:
        return exit.code, out.getvalue()
    except Exception as error:  # CommandError when called in-process
        return getattr(error, "returncode", 1), out.getvalue()
    return 0, out.getvalue()


def test_reconcile_finds_no_difference_after_normal_metering(metered):
    code, out = reconcile()
    assert code == 0 and "no differences" in out


def test_reconcile_reports_a_tampered_charged_total(metered):
    """The first allocation ended and was folded into its line: its own total is final, and checked."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE workers_allocation SET charged_total = charged_total + 7 WHERE id = %s", [metered[0].pk])
    code, out = reconcile()
    assert code == 1
    assert f"allocation {metered[0].pk}: charged" in out and "difference 0.000007" in out
    assert f"line {line_of(metered[0]).pk} (job {metered[0].job_id}" in out and "its ended allocations" in out


def test_reconcile_reports_an_allocation_billed_short_of_its_end(metered):
    Allocation.objects.filter(pk=metered[0].pk).update(ended_at=timezone.now() + timedelta(minutes=2))
    code, out = reconcile()
    assert code == 1 and f"line {line_of(metered[0]).pk}" in out and "its ended allocations" in out


def test_reconcile_reports_a_line_charged_more_than_its_seconds_cost(metered):
    BillingLine.objects.filter(pk=line_of(metered[1]).pk).update(charged_total=F("charged_total") + 7)
    code, out = reconcile()
    line = line_of(metered[1])
    assert code == 1
    assert f"line {line.pk} (job {line.job_id}, chip type {line.chip_type_id}, on_demand): charged" in out
    assert "(difference 0.000007)" in out and "charge rows sum to" in out


def test_reconcile_reports_a_line_billed_behind_now(metered):
    code, out = reconcile(lag=0)
    assert code == 1 and f"line {line_of(metered[1]).pk}" in out and "s behind now" in out


def test_reconcile_reports_seconds_a_line_was_charged_twice(metered):
    """A copy of a tick's row for the line (nothing paid, the chip-seconds counted again)."""
    row = Charge.objects.filter(job=metered[0].job).earliest("created_at")
    row.pk, row.amount, row.chip_seconds = None, 0, 10**6
    row.save()
    line = line_of(metered[0])
    in_rows = sum(Charge.objects.values_list("chip_seconds", flat=True))
    code, out = reconcile()
    assert code == 1
    assert f"charge rows hold {in_rows:,} chip-second(s), the line was billed {line.chip_seconds:,}" in out

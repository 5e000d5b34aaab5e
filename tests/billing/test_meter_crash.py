"""`kill -9` of a process in the middle of metering loses and doubles nothing (docs/RELIABILITY.md #7, #14)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import Charge
from billing.services.ledger import audit_ledger, balance_of
from billing.services.meter import SECOND, billing_mark, charge_allocations
from billing.services.reconciliation import differences
from fleet.choices import JobStatus
from fleet.models import Allocation
from tests.support.meter import fund, open_allocation, set_price
from tests.support.stack import REPO
from tests.support.stack import test_database_url as database_url

METER_LOOP = """
import django, time
django.setup()
from billing.services.meter import run_meter
print("ready", flush=True)
while True:
    run_meter(batch=40)
"""


def start_meter_loop() -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "portal.settings"}
    process = subprocess.Popen(
        [sys.executable, "-c", METER_LOOP], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdout.readline().strip() == b"ready", process.stdout.read()
    return process


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_meter_killed_at_random_points_bills_every_second_once(alice, enroll, planning_job, seed):  # noqa: F811
    rng = random.Random(seed)
    fund(alice)
    node, _ = enroll("crash", chips=8)
    job = planning_job(status=JobStatus.RUNNING)
    began = timezone.now() - timedelta(minutes=10)
    set_price(node.pool.chip_type, began - timedelta(hours=1), 2_400_000)
    allocations = [
        open_allocation(job, node, began + timedelta(microseconds=rng.randrange(10**6)), chips=rng.randint(1, 8))
        for _ in range(200)
    ]

    kills = 0
    for _ in range(4):
        process = start_meter_loop()
        time.sleep(rng.uniform(0.2, 2.0))
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        kills += 1
    process = start_meter_loop()  # the restarted meter, left to run to a clean stop
    time.sleep(1.0)
    process.terminate()
    process.wait()

    end = timezone.now()
    Allocation.objects.filter(pk__in=[a.pk for a in allocations]).update(ended_at=end)
    charge_allocations([a.pk for a in allocations], end)  # the final charge

    for allocation in Allocation.objects.filter(pk__in=[a.pk for a in allocations]):
        ran = (billing_mark(allocation.started_at, end) - allocation.started_at) // SECOND
        assert (allocation.billed_through - allocation.started_at) // SECOND == ran
    # Each allocation at its exact integral; each billing line's Charge rows hold its allocations'
    # chip-seconds once each ("a second was billed twice or never") and their charged totals.
    assert list(differences(end, timedelta(0), Allocation.objects.filter(pk__in=[a.pk for a in allocations]))) == []
    assert Charge.objects.exclude(created_at=end).exists(), "the killed meter never charged anything"
    assert balance_of(alice) == 10**12 - sum(a.charged_total for a in Allocation.objects.all())
    assert not audit_ledger()
    assert kills == 4

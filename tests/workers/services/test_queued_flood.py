"""Queued jobs can't flood the platform (docs/RELIABILITY.md #31).

What the enrolled fleet could never place is refused with `no_capacity`; a user may have only a
few jobs waiting; a waiting job holds credit (so at ¥0 nothing queues); waiting jobs are planned
with backoff, and at once when capacity changes; planning runs on a Celery queue of its own, and
the reconcile pass (lost nodes, notices, credit stops) plans nothing however many jobs wait.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing.services.holds import hold_needed
from fleet.choices import JobStatus
from fleet.models import Allocation, Job
from launcher.processes import platform_processes
from portal.celery import app as celery_app
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from tests.support.spot import job_spec, online_node
from workers.services import scheduling
from workers.services.allocations import release
from workers.services.monitor import reconcile

pytestmark = pytest.mark.django_db

ONE_4090 = {**JOB_SPEC, "chip_counts": {"rtx-4090": 1}}  # 1.20/h on-demand


@pytest.fixture
def busy_4090(catalog, make_user, fund):
    """The fleet's one RTX 4090 is taken by carol's job: chips exist, none is free."""
    node = online_node("busy-4090", "rtx-4090", spot=False)
    carol = make_user("carol")
    fund(carol, "100")
    job = Job.objects.create(owner=carol, **job_spec(status=JobStatus.RUNNING))
    now = timezone.now()
    Allocation.objects.create(
        job=job, node=node, chip_type=node.pool.chip_type, chips=1, epoch=1, started_at=now, billed_through=now
    )
    return job


@pytest.fixture
def funded_alice(alice, fund):
    fund(alice, "100")
    return alice


@pytest.fixture
def count_plannings(monkeypatch):
    """How many times a job was planned, by job id."""
    planned: list[int] = []
    plan = scheduling.schedule

    def counting(job_id: int) -> bool:
        planned.append(job_id)
        return plan(job_id)

    monkeypatch.setattr("workers.services.scheduling.schedule", counting)
    return planned


# Refusing what the fleet can never place


def test_a_job_the_enrolled_fleet_could_never_place_is_refused_naming_why(funded_alice, busy_4090, no_celery):
    response = token_client(funded_alice).post(
        "/api/v1/jobs/", {**JOB_SPEC, "chip_counts": {"h100-80g": 8}}, format="json"
    )

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "no_capacity"
    assert body["errors"]["chip_counts"] == [
        "8 × h100-80g asked; the fleet has 0 h100-80g chips online. It could never be placed."
    ]
    assert not Job.objects.filter(owner=funded_alice).exists() and not no_celery


def test_a_spot_only_job_needs_spot_eligible_chips_in_the_fleet(funded_alice, busy_4090, no_celery):
    spec = {**ONE_4090, "spot": True, "bid": "2.00", "allow_on_demand": False}
    response = token_client(funded_alice).post("/api/v1/jobs/", spec, format="json")

    assert response.status_code == 400 and response.json()["code"] == "no_capacity"
    assert "the fleet has 0 spot-eligible rtx-4090 chips online" in response.json()["errors"]["chip_counts"][0]


def test_the_quote_says_whether_a_job_would_wait_or_could_never_run(funded_alice, busy_4090):
    api = token_client(funded_alice)
    waits = api.post("/api/v1/quotes/", ONE_4090, format="json").json()
    never = api.post("/api/v1/quotes/", {**JOB_SPEC, "chip_counts": {"h100-80g": 8}}, format="json").json()

    assert waits["code"] == "no_capacity" and "waits in the queue" in waits["errors"]["chip_counts"][0]
    assert never["code"] == "no_capacity" and "could never be placed" in never["errors"]["chip_counts"][0]


def test_the_train_page_refuses_what_the_fleet_could_never_place(client, funded_alice, busy_4090, no_celery):
    client.force_login(funded_alice)
    launch = {
        "model": "llama-tiny",
        "dataset": "synthetic",
        "policy": "cost-performance",
        "max_budget": "28",
        "max_steps": "100",
        "per_device_batch_size": "4",
        "chips_h100-80g": "8",
    }

    response = client.post(reverse("train"), launch)

    assert response.status_code == 200
    assert "No capacity: 8 × h100-80g asked; the fleet has 0 h100-80g chips online." in response.content.decode()
    assert not Job.objects.filter(owner=funded_alice).exists()


# Waiting jobs: allowed, capped, and holding credit


def test_a_job_that_only_lacks_free_chips_queues_and_holds_credit(funded_alice, busy_4090, no_celery):
    response = token_client(funded_alice).post("/api/v1/jobs/", ONE_4090, format="json")

    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.status == JobStatus.QUEUED
    assert job.credit_hold == hold_needed(1_200_000)  # 5 minutes of its plan on the enrolled fleet


def test_at_a_zero_balance_a_job_that_would_wait_is_refused(bob, busy_4090, no_celery):
    response = token_client(bob).post("/api/v1/jobs/", ONE_4090, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "insufficient_credit"
    assert "Your balance is ¥0.00" in response.json()["errors"]["balance"][0]
    assert not Job.objects.filter(owner=bob).exists()


def test_waiting_jobs_hold_credit_against_later_launches(alice, fund, busy_4090, no_celery):
    fund(alice, "0.25")  # two holds of 0.10, not three
    api = token_client(alice)
    answers = [api.post("/api/v1/jobs/", ONE_4090, format="json") for _ in range(3)]

    assert [a.status_code for a in answers] == [201, 201, 400]
    assert "on top of ¥0.20 held by your queued jobs and bids" in answers[2].json()["errors"]["balance"][0]


def test_a_user_may_have_only_so_many_jobs_waiting(funded_alice, busy_4090, no_celery, settings):
    settings.MAX_QUEUED_JOBS_PER_USER = 3
    api = token_client(funded_alice)
    answers = [api.post("/api/v1/jobs/", ONE_4090, format="json") for _ in range(4)]

    assert [a.status_code for a in answers] == [201, 201, 201, 400]
    refused = answers[3].json()
    assert refused["code"] == "too_many_queued"
    assert "at most 3 may wait at once" in refused["errors"]["non_field_errors"][0]
    Job.objects.filter(owner=funded_alice).update(status=JobStatus.CANCELLED)  # they end: room again
    assert api.post("/api/v1/jobs/", ONE_4090, format="json").status_code == 201


# Planning with backoff, off the reconciler's queue


@pytest.fixture
def hundred_waiting_jobs(funded_alice, busy_4090, settings):
    """Valid jobs that can't be placed now (the only RTX 4090 is busy); a first failure waits 30 s.

    (Longer than the 2 s default, so that one pass over a hundred jobs on a slow machine ends before
    the first job's backoff does; the test of the intervals themselves freezes the clock instead.)
    """
    settings.PLAN_BACKOFF_MIN_S = 30
    spec = job_spec(chip_counts={"rtx-4090": 1})
    Job.objects.bulk_create(Job(owner=funded_alice, **spec) for _ in range(100))
    return list(Job.objects.filter(owner=funded_alice).values_list("pk", flat=True))


def test_the_reconcile_pass_plans_no_waiting_job_however_many_there_are(hundred_waiting_jobs, count_plannings):
    reconcile()  # settings rows created on first use are not the flood's doing
    with CaptureQueriesContext(connection) as flood:
        done = reconcile()
    assert count_plannings == [] and "scheduled" not in done
    Job.objects.filter(pk__in=hundred_waiting_jobs).delete()
    with CaptureQueriesContext(connection) as empty:
        reconcile()
    assert len(flood.captured_queries) == len(empty.captured_queries)  # the flood costs it nothing


def test_each_waiting_job_is_planned_at_most_once_per_backoff_interval(hundred_waiting_jobs, count_plannings):
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        scheduling.schedule_waiting_jobs()
        assert sorted(count_plannings) == sorted(hundred_waiting_jobs)  # each once
        scheduling.schedule_waiting_jobs()
        assert len(count_plannings) == 100  # none again within its backoff (30 s after a first failure)

        clock.move_to(start + timedelta(seconds=30))
        scheduling.schedule_waiting_jobs()
        assert len(count_plannings) == 200  # due again; now the backoff doubles to 60 s
        clock.move_to(start + timedelta(seconds=89))
        scheduling.schedule_waiting_jobs()
        assert len(count_plannings) == 200
        clock.move_to(start + timedelta(seconds=90))
        scheduling.schedule_waiting_jobs()
        assert len(count_plannings) == 300

    attempts = set(Job.objects.filter(pk__in=hundred_waiting_jobs).values_list("plan_attempts", flat=True))
    assert attempts == {3}


def test_the_backoff_stops_doubling_at_a_minute(settings):
    from workers.services.queue import backoff_seconds

    assert [backoff_seconds(n) for n in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert settings.PLAN_BACKOFF_MAX_S == 60


def test_chips_freeing_up_make_every_waiting_job_due_at_once(hundred_waiting_jobs, busy_4090, count_plannings):
    scheduling.schedule_waiting_jobs()  # all wait now, backing off
    scheduling.schedule_waiting_jobs()
    assert len(count_plannings) == 100

    release(busy_4090)  # carol's job ends: its chip is free

    scheduling.schedule_waiting_jobs()
    assert len(count_plannings) == 200
    assert Job.objects.filter(pk__in=hundred_waiting_jobs, status=JobStatus.PROVISIONING).count() == 1


def test_a_node_coming_online_makes_every_waiting_job_due_at_once(hundred_waiting_jobs, count_plannings):
    scheduling.schedule_waiting_jobs()
    scheduling.schedule_waiting_jobs()
    assert len(count_plannings) == 100

    online_node("new-4090", "rtx-4090", spot=False)

    scheduling.schedule_waiting_jobs()
    assert len(count_plannings) == 200
    assert Job.objects.filter(pk__in=hundred_waiting_jobs, status=JobStatus.PROVISIONING).count() == 1


def test_planning_has_a_queue_of_its_own_and_the_meter_and_reconciler_stay_on_the_default():
    route = celery_app.amqp.router.route
    default = celery_app.conf.task_default_queue
    for task in ("workers.tasks.schedule_job", "workers.tasks.schedule_waiting_jobs"):
        assert route({}, task)["queue"].name == f"{default}.planning"
    for task in (
        "workers.tasks.reconcile_jobs",
        "billing.tasks.run_meter",
        "billing.tasks.audit_ledger",
        "market.tasks.clear_market",
    ):
        assert route({}, task)["queue"].name == default


def test_a_private_default_queue_gets_its_own_planning_queue():
    """What tests/support/stack.py relies on: its producer swaps the default queue, planning follows."""
    previous = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = "test-1234"
    try:
        assert celery_app.amqp.router.route({}, "workers.tasks.schedule_job")["queue"].name == "test-1234.planning"
    finally:
        celery_app.conf.task_default_queue = previous


def test_make_run_starts_a_planning_worker_beside_the_worker(tmp_path: Path):
    processes = platform_processes({"STARVERSE_DATA_DIR": str(tmp_path), "CELERY_QUEUE": "sv"})
    assert " worker " in processes["worker"] and "-Q sv " in processes["worker"]
    assert " worker " in processes["planner"] and "-Q sv.planning " in processes["planner"]
    assert "beat" in processes["beat"]

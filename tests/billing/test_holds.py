"""Holds at launch and placement; low balance and total budget stop a job with a checkpoint (docs/RELIABILITY.md #8)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import BillingLine, OperatorSettings
from billing.services.credits import adjust_credit
from billing.services.holds import HoldRefused, check_hold
from billing.services.ledger import balance_of
from billing.services.meter import run_meter
from billing.signals import credit_shortfall
from fleet.choices import JobStatus
from fleet.models import Allocation, Job
from kernel.protocol import CommandType
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from tests.support.plans import hand_plan
from workers.models import AgentCommand
from workers.receivers import stop_job_short_of_credit
from workers.services import lifecycle, monitor, reports
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db

SPEC = JOB_SPEC
api_for = token_client


def stop_low_balance(now=None) -> int:
    """The reconciler's credit steps: billing names the jobs to stop, the lifecycle stops them (and ends
    stops the ranks never answered)."""
    now = now or timezone.now()
    return monitor.stop_jobs_out_of_credit(now) + lifecycle.finish_overdue_stops(now)


@pytest.fixture
def rtx_and_tpu_nodes(enroll):  # noqa: F811
    return [enroll("h-4090", "rtx-4090", chips=2)[0], enroll("h-v5e", "tpu-v5e")[0]]


def test_a_launch_the_balance_cannot_hold_is_refused_naming_the_balance(alice, rtx_and_tpu_nodes, monkeypatch):
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda job_id: None)
    response = api_for(alice).post("/api/v1/jobs/", SPEC, format="json")
    assert response.status_code == 400
    message = response.json()["errors"]["balance"][0]
    assert "Your balance is ¥0.00" in message and "5 minutes" in message
    assert not Job.objects.exists()


def test_a_launch_the_balance_can_hold_is_queued(alice, rtx_and_tpu_nodes, monkeypatch):
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda job_id: None)
    adjust_credit(alice, 10_000_000, reason="top-up", actor=None, key="fund")
    response = api_for(alice).post("/api/v1/jobs/", SPEC, format="json")
    assert response.status_code == 201, response.json()


def test_the_hold_is_hold_minutes_of_the_plan(alice):
    adjust_credit(alice, 100_000, reason="top-up", actor=None, key="fund")  # ¥0.10
    check_hold(alice, 1_200_000)  # 5 minutes of ¥1.20/h is exactly ¥0.10
    with pytest.raises(HoldRefused, match=r"Your balance is ¥0\.10; .* needs at least ¥0\.11,"):  # rounded up
        check_hold(alice, 1_200_012)


def test_a_queued_job_that_can_no_longer_be_held_fails_at_placement(alice, rtx_and_tpu_nodes, planning_job):  # noqa: F811
    job = planning_job()
    assert allocate(job, hand_plan((rtx_and_tpu_nodes[0], 1), price_per_hour=1_200_000)) == []
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "Your balance is ¥0.00" in job.status_reason
    assert not Allocation.objects.exists()


@pytest.fixture
def running(alice, rtx_and_tpu_nodes, planning_job):  # noqa: F811
    """A job on 2 RTX 4090 chips (¥2.40/h) that started a minute ago."""
    adjust_credit(alice, 10_000_000, reason="top-up", actor=None, key="fund")
    job = planning_job()
    allocate(job, hand_plan((rtx_and_tpu_nodes[0], 1), (rtx_and_tpu_nodes[0], 1)))
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    job.refresh_from_db()
    return job


def test_low_balance_checkpoints_and_stops_the_job_before_the_wallet_is_empty(
    alice, running, mailoutbox, django_capture_on_commit_callbacks
):
    # ¥2.40/h for the 2-minute stop margin is ¥0.08: leave ¥0.07.
    adjust_credit(alice, -(10_000_000 - 70_000), reason="spent elsewhere", actor=None, key="drain")
    with django_capture_on_commit_callbacks(execute=True):
        stopped = stop_low_balance()
    job = Job.objects.get(pk=running.pk)
    assert stopped == 1
    assert job.status == JobStatus.STOPPING and "Stopped before your balance ran out" in job.status_reason
    stop = AgentCommand.objects.get(job=job, type=CommandType.STOP)
    assert stop.payload["checkpoint"] is True
    assert job.events.filter(kind="notice", data__stop="no_credit").count() == 1
    assert len(mailoutbox) == 1 and "Stopped before your balance ran out" in mailoutbox[0].body
    assert balance_of(alice) > 0


def test_a_comfortable_balance_leaves_the_job_running(alice, running):
    assert stop_low_balance() == 0
    assert Job.objects.get(pk=running.pk).status == JobStatus.RUNNING


def test_a_second_pass_does_not_stop_twice(alice, running, django_capture_on_commit_callbacks):
    adjust_credit(alice, -(10_000_000 - 70_000), reason="spent elsewhere", actor=None, key="drain")
    with django_capture_on_commit_callbacks(execute=True):
        stop_low_balance()
        stop_low_balance()
    assert AgentCommand.objects.filter(job=running, type=CommandType.STOP).count() == 1


def test_the_total_budget_stops_the_job(alice, running):
    Job.objects.filter(pk=running.pk).update(total_budget=100_000)
    five_minutes_ago = running.created_at - timedelta(minutes=5)
    Allocation.objects.filter(job=running).update(started_at=five_minutes_ago, billed_through=five_minutes_ago)
    BillingLine.objects.filter(job=running).update(billed_through=five_minutes_ago)
    assert stop_low_balance() == 1
    job = Job.objects.get(pk=running.pk)
    assert job.status == JobStatus.STOPPING and "total budget of ¥0.10" in job.status_reason


def test_the_ranks_exiting_after_a_credit_stop_end_the_job_as_stopped_no_credit(alice, running, rtx_and_tpu_nodes):
    adjust_credit(alice, -(10_000_000 - 70_000), reason="spent elsewhere", actor=None, key="drain")
    stop_low_balance()
    job = Job.objects.get(pk=running.pk)
    for rank in range(2):
        reports._record_exit(job, {"rank": rank, "code": 0}, now=timezone.now())
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED_NO_CREDIT
    assert not Allocation.objects.open().filter(job=job).exists()
    assert balance_of(alice) >= 0


def test_a_stop_the_ranks_never_answer_ends_after_the_grace(alice, running, settings):
    adjust_credit(alice, -(10_000_000 - 70_000), reason="spent elsewhere", actor=None, key="drain")
    stop_low_balance()
    stop_low_balance(now=timezone.now() + timedelta(seconds=settings.JOB_STOP_GRACE_S + 11))
    assert Job.objects.get(pk=running.pk).status == JobStatus.STOPPED_NO_CREDIT


def test_the_meter_and_the_stop_margin_keep_the_wallet_above_zero(alice, running, django_capture_on_commit_callbacks):
    """Ticks every 5 s with the monitor between them: the job stops while money is left."""
    OperatorSettings.objects.filter(pk=1).update(stop_margin_minutes=2)
    adjust_credit(alice, -(10_000_000 - 200_000), reason="spent elsewhere", actor=None, key="drain")  # ¥0.20
    now = timezone.now()
    for tick in range(0, 600, 5):
        with django_capture_on_commit_callbacks(execute=True):
            run_meter(now + timedelta(seconds=tick))
            stop_low_balance(now + timedelta(seconds=tick))
        if Job.objects.get(pk=running.pk).status != JobStatus.RUNNING:
            break
    assert Job.objects.get(pk=running.pk).status == JobStatus.STOPPING
    assert balance_of(alice) > 0
    assert not running.events.filter(data__has_key="shortfall").exists()


def test_a_credit_stop_lost_with_the_worker_that_should_act_on_it_is_made_by_the_next_reconcile_pass(
    alice, running, django_capture_on_commit_callbacks
):
    adjust_credit(alice, -(10_000_000 - 1_000), reason="spent elsewhere", actor=None, key="drain")  # ¥0.001 left
    credit_shortfall.disconnect(dispatch_uid="workers.stop_jobs_short_of_credit")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            charged = run_meter(timezone.now() + timedelta(minutes=1))  # owes ¥0.04; its announcement reaches nobody
    finally:
        credit_shortfall.connect(stop_job_short_of_credit, dispatch_uid="workers.stop_jobs_short_of_credit")
    assert charged.shortfalls and Job.objects.get(pk=running.pk).status == JobStatus.RUNNING

    monitor.reconcile()

    job = Job.objects.get(pk=running.pk)
    assert job.status == JobStatus.STOPPING and "balance ran out" in job.status_reason
    assert balance_of(alice) == 0

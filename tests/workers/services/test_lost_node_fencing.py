"""A lost node is fenced at the moment of loss: its late reports are refused, its returning agent
kills the old ranks before it is back in service, and the insurance pays for work really lost."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from billing.models import Price, Transaction
from billing.services.ledger import balance_of
from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node, Pool
from kernel.money import round_micros
from tests.support.plans import hand_plan
from workers.models import AgentCommand, EnrollmentToken, JobMetric
from workers.services import lifecycle
from workers.services.enrollment import enroll_node
from workers.services.monitor import reconcile
from workers.services.node_lifecycle import record_heartbeat
from workers.services.placement import allocate
from workers.services.scheduling import schedule

pytestmark = pytest.mark.django_db

REPORT, POLL = "/api/v1/agent/report/", "/api/v1/agent/poll/"


@pytest.fixture(autouse=True)
def schedule_inline(monkeypatch):
    monkeypatch.setattr("workers.tasks.schedule_job.delay", lambda job_id: schedule(job_id))


def enroll(hostname: str) -> tuple[Node, APIClient]:
    _, raw = EnrollmentToken.issue(Pool.objects.get(chip_type__slug="rtx-4090"))
    enrolled = enroll_node(
        enrollment_token=raw, hostname=hostname, chip_type="rtx-4090", chips=1, simulated=True, address="127.0.0.1"
    )
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {enrolled.token}")
    return enrolled.node, api


def at(moment: datetime) -> float:
    return moment.timestamp()


def metric(step: int, t: datetime) -> dict:
    return {"kind": "metric", "rank": 0, "step": step, "loss": 3.0, "tokens_per_s": 100.0, "t": at(t)}


def send(api: APIClient, job: Job, epoch: int, *items: dict):
    return api.post(REPORT, {"job_id": job.pk, "epoch": epoch, "items": list(items)}, format="json")


@pytest.fixture
def lost(catalog, alice, fund, settings):
    """Job on node a, checkpointed at step 10, reached step 14, then a fell silent and was declared lost.

    Returns a dict of what the test needs; node b is free for the job to resume on later.
    """
    fund(alice)
    a, api_a = enroll("lost-a")
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=100,
        max_budget_per_hour=28_000_000, status=JobStatus.PLANNING,
    )  # fmt: skip
    allocate(job, hand_plan((a, 4), global_batch=4))
    started = job.allocations.get().started_at
    checkpoint_at = started + timedelta(seconds=2)
    assert send(api_a, job, 1, metric(1, started + timedelta(seconds=1))).status_code == 200
    checkpoint = {
        "kind": "checkpoint",
        "rank": 0,
        "step": 10,
        "path": f"store:checkpoints/job-{job.pk}/step-10",
        "seconds": 0.1,
        "t": at(checkpoint_at),
    }
    assert send(api_a, job, 1, metric(10, checkpoint_at), checkpoint, metric(14, checkpoint_at)).status_code == 200
    last_heartbeat = checkpoint_at + timedelta(seconds=3)
    record_heartbeat(a, {}, now=last_heartbeat)
    noticed = last_heartbeat + timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S + 1)
    assert reconcile(now=noticed)["lost_nodes"] == 1
    job.refresh_from_db()
    return {"job": job, "a": a, "api_a": api_a, "last_heartbeat": last_heartbeat, "noticed": noticed,
            "checkpoint_at": checkpoint_at}  # fmt: skip


def test_the_epoch_is_fenced_at_the_moment_of_loss_and_late_reports_are_refused(lost):
    job, api_a = lost["job"], lost["api_a"]
    migration = job.migrations.get()
    # Nowhere to go yet: the job waits, but its old placement is over already.
    assert job.status == JobStatus.QUEUED and job.epoch == migration.from_epoch + 1 == 2

    late_metric = send(api_a, job, 1, metric(20, lost["noticed"]))
    late_checkpoint = send(
        api_a,
        job,
        1,
        {
            "kind": "checkpoint",
            "rank": 0,
            "step": 20,
            "path": f"store:checkpoints/job-{job.pk}/step-20",
            "t": at(lost["noticed"]),
        },
    )
    late_exit = send(api_a, job, 1, {"kind": "exit", "rank": 0, "code": 0})
    assert [r.status_code for r in (late_metric, late_checkpoint, late_exit)] == [409, 409, 409]
    job.refresh_from_db()
    assert (job.step, job.latest_checkpoint, job.status) == (
        14,
        f"store:checkpoints/job-{job.pk}/step-10",
        JobStatus.QUEUED,
    )
    assert not JobMetric.objects.filter(job=job, step=20).exists()


def test_a_returning_node_gets_the_kill_first_and_is_in_service_only_once_its_ranks_are_gone(lost):
    job, a, api_a = lost["job"], lost["a"], lost["api_a"]
    running = [{"job_id": job.pk, "epoch": 1, "rank": 0, "pid": 4242, "state": "running"}]

    commands = api_a.post(POLL, {"ranks": running}, format="json").json()["commands"]
    kills = [c for c in commands if c["job_id"] == job.pk]
    assert [(c["type"], c["epoch"], c["payload"]["grace_s"], c["payload"]["checkpoint"]) for c in kills] == [
        ("stop", 2, 0, False)
    ]
    assert not AgentCommand.objects.filter(job=job, epoch=1, status="pending").exists()  # the old start is withdrawn
    a.refresh_from_db()
    assert a.agent_status == AgentStatus.LOST  # back, but its fenced rank still runs: nothing new lands here

    api_a.post(POLL, {"acks": [kills[0]["id"]], "ranks": running}, format="json")
    assert Node.objects.get(pk=a.pk).agent_status == AgentStatus.LOST
    exited = [{**running[0], "state": "exited"}]
    api_a.post(POLL, {"ranks": exited}, format="json")
    assert Node.objects.get(pk=a.pk).agent_status == AgentStatus.ONLINE


def test_the_resume_gets_a_fresh_epoch_and_the_insurance_pays_only_for_work_really_lost(lost, alice):
    job, api_a = lost["job"], lost["api_a"]
    old = job.allocations.get(epoch=1)
    assert old.ended_at == lost["noticed"] and old.billed_through <= lost["noticed"]  # billed nothing after the loss
    send(api_a, job, 1, metric(30, lost["noticed"]))  # a late report: refused, so never counted as lost work

    b, api_b = enroll("lost-b")
    schedule(job.pk)
    job.refresh_from_db()
    migration = job.migrations.get()
    assert job.status == JobStatus.PROVISIONING and job.epoch == 3 and migration.to_epoch == 3
    start = AgentCommand.objects.get(job=job, epoch=3, type="start", node=b)
    assert start.payload["ranks"][0]["resume_from"] == f"store:checkpoints/job-{job.pk}/step-10"
    assert send(api_a, job, 2, metric(15, timezone.now())).status_code == 409  # the fenced epoch is never reused

    before = balance_of(alice)
    assert send(api_b, job, 3, metric(11, timezone.now())).status_code == 200
    migration.refresh_from_db()
    assert (migration.checkpoint_step, migration.resume_step, migration.steps_lost) == (10, 11, 4)
    assert migration.last_seen_at == lost["last_heartbeat"]
    assert migration.lost_seconds == pytest.approx(3.0)  # checkpoint -> last heartbeat, not -> detection (12 s)
    new = job.allocations.get(epoch=3)
    price = Price.objects.filter(chip_type__slug="rtx-4090").order_by("-effective_at").first().on_demand_per_hour
    lost_us = (lost["last_heartbeat"] - lost["checkpoint_at"]) // timedelta(microseconds=1)
    moving_us = (migration.resumed_at - new.started_at) // timedelta(microseconds=1)
    expected = round_micros(Decimal(price * (lost_us + moving_us)) / (3600 * 1_000_000))
    assert migration.refund == expected
    assert Transaction.objects.get(idempotency_key=f"insurance:{migration.pk}").kind == "refund"
    assert balance_of(alice) == before + expected


def test_lost_work_ends_at_the_last_step_reported_when_that_came_after_the_last_heartbeat(
    catalog, alice, fund, settings
):
    """A poll is a heartbeat at its start, up to a long-poll's wait before the freeze; steps reported
    after it were still worked, so steps and seconds lost agree."""
    fund(alice)
    a, api_a = enroll("lost-d")
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=100,
        max_budget_per_hour=28_000_000, status=JobStatus.PLANNING,
    )  # fmt: skip
    allocate(job, hand_plan((a, 4), global_batch=4))
    heartbeat = job.allocations.get().started_at + timedelta(seconds=1)
    record_heartbeat(a, {}, now=heartbeat)
    checkpoint = {
        "kind": "checkpoint",
        "rank": 0,
        "step": 10,
        "path": f"store:checkpoints/job-{job.pk}/step-10",
        "t": at(heartbeat),
    }
    send(api_a, job, 1, metric(10, heartbeat), checkpoint, metric(12, heartbeat + timedelta(seconds=2)))
    reconcile(now=heartbeat + timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S + 1))
    migration = job.migrations.get()
    assert migration.last_seen_at == heartbeat + timedelta(seconds=2)
    _, api_b = enroll("lost-e")
    schedule(job.pk)
    send(api_b, job, 3, metric(11, timezone.now()))
    migration.refresh_from_db()
    assert (migration.steps_lost, migration.lost_seconds) == (2, pytest.approx(2.0))


def test_a_lost_job_that_cannot_move_is_failed_and_fenced_too(catalog, alice, settings):
    a, api_a = enroll("lost-c")
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=5,
        max_budget_per_hour=28_000_000, status=JobStatus.PLANNING,
    )  # fmt: skip
    allocate(job, hand_plan((a, 4)))
    send(api_a, job, 1, metric(5, timezone.now()))  # past its last step: saving its model, not movable
    reconcile(now=timezone.now() + timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S + 1))
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "went silent" in job.status_reason and job.epoch == 2
    assert send(api_a, job, 1, metric(6, timezone.now())).status_code == 409
    assert AgentCommand.objects.filter(job=job, node=a, epoch=2, type="stop", status="pending").exists()


@pytest.mark.parametrize(
    ("stop", "ends_as"),
    [("cancel", JobStatus.CANCELLED), ("credit", JobStatus.STOPPED_NO_CREDIT)],
)
def test_a_job_whose_node_is_lost_while_it_stops_ends_as_it_was_asked(catalog, alice, fund, settings, stop, ends_as):
    fund(alice)
    node, _ = enroll("stopping-a")
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=100,
        max_budget_per_hour=28_000_000, status=JobStatus.PLANNING,
    )  # fmt: skip
    allocate(job, hand_plan((node, 4)))
    if stop == "cancel":
        lifecycle.cancel(job)
    elif stop == "credit":
        Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
        lifecycle.stop_for_credit(job.pk, "Stopped before your balance ran out.")
    epoch = Job.objects.get(pk=job.pk).epoch

    later = timezone.now() + timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S + 1)
    reconcile(later)

    job.refresh_from_db()
    assert job.status == ends_as and job.epoch == epoch + 1  # fenced, whatever way it ends

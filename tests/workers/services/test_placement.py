"""Allocation is atomic, cancel works at any time, silent nodes fail their jobs (docs/RELIABILITY.md #16)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier

import pytest
from django.db import connection
from django.utils import timezone

from fleet.choices import AgentStatus, JobStatus
from fleet.models import Allocation, Job, Node
from tests.support.plans import hand_plan
from workers.models import AgentCommand
from workers.services.lifecycle import cancel as cancel_job
from workers.services.monitor import reconcile
from workers.services.placement import CapacityChanged, allocate, master_port


@pytest.mark.django_db(transaction=True)
def test_two_jobs_placed_at_the_same_instant_never_get_the_same_chip(enroll, planning_job):
    node, _ = enroll("only", chips=2)
    jobs = [planning_job() for _ in range(6)]
    barrier = Barrier(len(jobs))

    def place(job):
        barrier.wait()
        try:
            return allocate(job, hand_plan((node, 2), (node, 2)))
        except CapacityChanged as error:
            return error
        finally:
            connection.close()

    with ThreadPoolExecutor(len(jobs)) as pool:
        outcomes = list(pool.map(place, jobs))

    assert sum(isinstance(o, list) for o in outcomes) == 1
    assert sum(isinstance(o, CapacityChanged) for o in outcomes) == 5
    assert sum(a.chips for a in Allocation.objects.open().filter(node=node)) == 2


@pytest.mark.django_db
def test_placing_bumps_the_epoch_and_a_second_placement_of_the_same_claim_does_nothing(enroll, planning_job):
    node, _ = enroll("a", chips=2)
    job = planning_job()
    assert allocate(job, hand_plan((node, 1)))
    assert allocate(job, hand_plan((node, 1))) == []
    job.refresh_from_db()
    assert (job.epoch, job.status) == (1, JobStatus.PROVISIONING)
    assert Allocation.objects.filter(job=job).count() == 1


@pytest.mark.django_db
def test_cancelling_a_queued_job_ends_it_at_once(planning_job):
    job = planning_job(status=JobStatus.QUEUED)
    cancel_job(job)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


@pytest.mark.django_db
def test_cancelling_a_running_job_tells_its_agents_to_stop(enroll, planning_job):
    node, _ = enroll("a")
    job = planning_job()
    allocate(job, hand_plan((node, 2)))
    cancel_job(job)
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPING
    stop = AgentCommand.objects.get(job=job, type="stop")
    assert stop.payload["checkpoint"] is False


@pytest.mark.django_db
def test_a_node_that_goes_silent_moves_its_job_off_it_and_stops_billing_its_chips(enroll, planning_job, settings):
    node, _ = enroll("quiet")
    job = planning_job()
    allocate(job, hand_plan((node, 2)))
    Node.objects.filter(pk=node.pk).update(
        last_heartbeat_at=timezone.now() - timedelta(seconds=settings.AGENT_HEARTBEAT_DEADLINE_S + 1)
    )
    reconcile()
    job.refresh_from_db()
    node.refresh_from_db()
    assert node.agent_status == AgentStatus.LOST
    assert job.status == JobStatus.QUEUED  # nowhere else to go yet: it waits for chips, from its checkpoint
    migration = job.migrations.get()
    assert migration.reason == "lost_node" and migration.nodes == ["quiet"]
    assert "quiet went silent" in migration.detail
    assert not job.allocations.open().exists()


@pytest.mark.django_db
def test_reconciling_twice_changes_nothing_more(enroll, planning_job, settings):
    node, _ = enroll("quiet")
    job = planning_job()
    allocate(job, hand_plan((node, 2)))
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    first, second = reconcile(), reconcile()
    assert first["lost_nodes"] == 1 and second["lost_nodes"] == 0
    assert Job.objects.get(pk=job.pk).migrations.count() == 1
    assert Job.objects.get(pk=job.pk).events.filter(kind="notice").count() == 1


def test_rendezvous_ports_differ_by_placement_and_stay_below_the_ephemeral_range(settings):
    settings.RENDEZVOUS_PORT_BASE, settings.RENDEZVOUS_PORT_SPAN = 29500, 3000
    ports = {master_port(Job(pk=job, epoch=epoch)) for job in range(1, 200) for epoch in (1, 2, 3)}

    assert min(ports) >= 29500 and max(ports) < 32768  # Linux hands out ports from 32768 to anyone
    assert len(ports) > 500  # placements spread over the range

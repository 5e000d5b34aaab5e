"""An agent that restarted (killed and brought back by `make run` within the heartbeat deadline) has
lost its ranks: its first poll lists none of the job's placement, so the job is fenced and moved on
as from a lost node, instead of failing when its other ranks crash for want of their peer."""

# ruff: noqa: F811

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from fleet.choices import CommandStatus, JobStatus, MigrationReason
from fleet.models import Job
from tests.support.plans import hand_plan
from workers.models import AgentCommand, JobMigration, RankExit
from workers.services.placement import allocate

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_on_two_nodes(alice, fund, enroll, planning_job):
    """A job running one rank on each of two nodes, whose agents acked starting them."""
    fund(alice)
    (first, first_token), (second, second_token) = enroll("restart-a"), enroll("restart-b")
    job = planning_job(max_steps=500)
    allocate(job, hand_plan((first, 4), (second, 4)))
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, step=40, latest_checkpoint_step=30)
    AgentCommand.objects.filter(job=job).update(status=CommandStatus.DONE)
    job.refresh_from_db()
    return job, agent(first_token), agent(second_token)


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def poll(client: APIClient, ranks: list[dict] | None):
    body = {"wait_s": 0} if ranks is None else {"wait_s": 0, "ranks": ranks}
    response = client.post("/api/v1/agent/poll/", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def states(job: Job, rank: int, state: str = "running") -> list[dict]:
    return [{"job_id": job.pk, "epoch": job.epoch, "rank": rank, "pid": 1234, "state": state}]


def test_a_restarted_agent_listing_none_of_its_ranks_gets_the_job_moved_as_from_a_lost_node(running_on_two_nodes):
    job, first, second = running_on_two_nodes
    epoch = job.epoch
    poll(second, states(job, 1))

    poll(first, [])  # the agent restarted: its rank 0 is gone

    job.refresh_from_db()
    migration = JobMigration.objects.get(job=job)
    assert migration.reason == MigrationReason.LOST_NODE and migration.nodes == ["restart-a"]
    assert "restarted" in migration.detail
    assert job.epoch > epoch  # fenced: the peer's crash report of the old epoch is refused as stale
    assert job.status in (JobStatus.MIGRATING, JobStatus.QUEUED, JobStatus.PLANNING, JobStatus.PROVISIONING)
    assert not job.allocations.filter(epoch=epoch, ended_at__isnull=True).exists()
    crash = {"kind": "exit", "rank": 1, "code": 1, "error": "Connection closed by peer"}
    stale = second.post("/api/v1/agent/report/", {"job_id": job.pk, "epoch": epoch, "items": [crash]}, format="json")
    assert stale.status_code == 409


def test_an_agent_still_listing_its_ranks_keeps_its_job(running_on_two_nodes):
    job, first, _ = running_on_two_nodes
    poll(first, states(job, 0))
    poll(first, states(job, 0, "exited"))  # exited but not yet forgotten: still listed
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and not JobMigration.objects.exists()


def test_ranks_that_exited_and_were_reported_are_not_taken_for_vanished(running_on_two_nodes):
    job, first, _ = running_on_two_nodes
    RankExit.objects.create(job=job, epoch=job.epoch, rank=0, code=0, created_at=job.updated_at)
    poll(first, [])
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and not JobMigration.objects.exists()


def test_ranks_not_started_yet_and_polls_without_a_rank_list_move_nothing(running_on_two_nodes):
    job, first, _ = running_on_two_nodes
    poll(first, None)  # an agent that doesn't list its ranks says nothing about them
    AgentCommand.objects.filter(job=job).update(status=CommandStatus.PENDING)
    poll(first, [])  # not acked: the agent may be starting them right now
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and not JobMigration.objects.exists()

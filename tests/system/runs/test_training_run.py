"""A real mixed-chip training run: real Celery worker and beat, real agents, real DeepSpeed ranks.

The demo fleet here is three simulated chip types on this machine's CPU (labelled simulated);
everything else, from the HTTP API to the checkpoint files, is the production path.
"""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from fleet.choices import AgentStatus, JobStatus
from fleet.models import Job, Node
from kernel.storage.trees import read_manifest
from tests.support.accounts import token_client
from tests.support.stack import platform_stack, wait_until
from workers.models import JobMetric
from workers.services.capacity import free_chips
from workers.services.storage import platform_store

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FLEET = [("e2e-rtx-4090", "rtx-4090"), ("e2e-tpu-v5e", "tpu-v5e"), ("e2e-ascend-910b", "ascend-910b")]


@pytest.fixture
def stack_with_agents(live_server, settings, tmp_path, alice, fund):
    call_command("seed_catalog", stdout=io.StringIO())
    fund(alice)
    # These runs are about planning and training on all three chip types. On a loaded 2-core machine an agent
    # can stall past the 8-s default while the others start, and a node declared lost then is left out of the
    # plan (tests/workers/services/test_lost_node_fencing.py covers lost nodes).
    settings.AGENT_HEARTBEAT_DEADLINE_S = 30
    with platform_stack(live_server, settings, tmp_path) as stack:
        for hostname, chip in FLEET:
            stack.add_agent(hostname, chip)
        wait_until(
            lambda: (
                Node.objects.filter(hostname__startswith="e2e-", agent_status=AgentStatus.ONLINE).count() == len(FLEET)
            ),
            60,
            "the agents to enroll",
            stack,
        )
        yield stack


def test_the_demo_fleet_trains_llama_tiny_across_three_chip_types(stack_with_agents, alice, live_server):
    api = token_client(alice)
    response = api.post(
        "/api/v1/jobs/",
        {
            "model": "llama-tiny",
            "dataset": "synthetic",
            "per_device_batch_size": 4,
            "max_steps": 40,
            "policy": "fastest",
            "max_budget": "28",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]

    job = wait_until(
        lambda: Job.objects.filter(pk=job_id, status__in=JobStatus.finished()).first(),
        300,
        "the job to finish",
        stack_with_agents,
    )

    assert job.status == JobStatus.SUCCEEDED, f"{job.status}: {job.status_reason}\n{stack_with_agents.logs()}"
    chips = {rank.chip for rank in job.plan.ranks}
    nodes = dict(Node.objects.filter(hostname__startswith="e2e-").values_list("hostname", "agent_status"))
    assert chips == {"rtx-4090", "tpu-v5e", "ascend-910b"}, (job.plan.ranks, nodes, stack_with_agents.logs())
    assert job.step == 40
    assert job.loss < job.first_loss * 0.9, (job.first_loss, job.loss)
    assert set(JobMetric.objects.filter(job=job).values_list("chip_type", flat=True)) == chips
    assert job.latest_checkpoint == f"store:checkpoints/job-{job_id}/step-40"  # the final one, in object storage
    assert read_manifest(platform_store(), f"checkpoints/job-{job_id}/step-40") is not None
    artifacts = api.get(f"/api/v1/jobs/{job_id}/artifacts/").json()
    assert any(a["kind"] == "final model" for a in artifacts)
    assert not job.allocations.open().exists()
    nodes = Node.objects.filter(hostname__startswith="e2e-")
    assert all(free == node.chips for node, free in zip(nodes, free_chips(nodes).values(), strict=True))
    body = api.get(f"/api/v1/jobs/{job_id}/").json()
    assert body["status"] == "succeeded" and body["step"] == 40 and body["plan"]["ranks"]


def test_the_agents_hold_no_store_credentials_yet_their_ranks_stage_and_checkpoint(stack_with_agents, alice):
    """Hosts are third parties (#28): the agents were started without STORAGE_URL or AWS_*, and their ranks
    stage an uploaded dataset and store every checkpoint with their launches' storage grants alone."""
    api = token_client(alice)
    upload = SimpleUploadedFile("words.txt", b"the quick brown fox jumps over the lazy dog\n" * 400)
    dataset = api.post("/api/v1/datasets/", {"file": upload, "name": "words"}, format="multipart")
    assert dataset.status_code == 201, dataset.json()
    spec = {"model": "llama-tiny", "dataset": dataset.json()["reference"], "per_device_batch_size": 4}
    response = api.post(
        "/api/v1/jobs/", {**spec, "max_steps": 20, "policy": "cheapest", "max_budget": "28"}, format="json"
    )
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]

    job = wait_until(
        lambda: Job.objects.filter(pk=job_id, status__in=JobStatus.finished()).first(),
        300,
        "the job to finish",
        stack_with_agents,
    )

    agents = [name for name in stack_with_agents.processes if name.startswith("agent-")]
    assert agents and not any(
        name.startswith("AWS_") or name == "STORAGE_URL"
        for agent in agents
        for name in stack_with_agents.environment_of(agent)
    )
    assert job.status == JobStatus.SUCCEEDED, f"{job.status}: {job.status_reason}\n{stack_with_agents.logs()}"
    assert job.latest_checkpoint == f"store:checkpoints/job-{job_id}/step-20"
    assert read_manifest(platform_store(), f"checkpoints/job-{job_id}/step-20") is not None

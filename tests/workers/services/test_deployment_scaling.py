"""How a deployment keeps its replicas (workers/services/deployments.py): its minimum, a cold start from zero,
one more while requests pile up, none once idle, a stop when its budget or its owner's credit runs out, a
failure after replicas keep failing; a replica's launch and what its host may report (docs/SERVING.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.services.meter import charge_allocation
from fleet.choices import JobStatus
from fleet.models import Deployment, DeploymentStatus, Job, Node
from tests.support.deployments import servable_model
from tests.support.meter import open_allocation, set_price
from tests.support.plans import hand_plan
from workers.services import lifecycle
from workers.services.deployments import DeploymentRefused, create_deployment, scale, scale_deployments, wake
from workers.services.placement import rank_launches

pytestmark = pytest.mark.django_db


@pytest.fixture
def deploy(alice, fund, small_fleet, no_celery):
    fund(alice)
    model = servable_model(alice).reference

    def make(**fields) -> Deployment:
        terms = {"name": "tiny-chat", "model_name": model, "max_budget_per_hour": 28_000_000, **fields}
        return create_deployment(alice, **terms)

    return make


def live(deployment: Deployment) -> list[Job]:
    return list(deployment.replicas.exclude(status__in=JobStatus.finished()).filter(cancel_requested_at__isnull=True))


def made_ready(job: Job) -> Job:
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.RUNNING, serving={"state": "ready", "url": "http://127.0.0.1:9/v1", "epoch": job.epoch}
    )
    return Job.objects.get(pk=job.pk)


def test_a_deployment_keeps_its_minimum_and_a_lost_replica_is_replaced(deploy):
    deployment = deploy(min_replicas=2, max_replicas=3)
    first, second = live(deployment)
    lifecycle.fail(first, "the engine crashed")
    assert scale(deployment, timezone.now()) == (1, 0)
    assert len(live(deployment)) == 2 and first not in live(deployment)


def test_an_idle_deployment_with_a_minimum_of_zero_scales_to_zero_then_wakes_on_a_request(deploy):
    deployment = deploy(min_replicas=0, idle_timeout_s=60)
    assert deployment.status == DeploymentStatus.IDLE and live(deployment) == []
    wake(deployment)  # a request: a cold start
    [replica] = live(deployment)
    made_ready(replica)
    later = timezone.now() + timedelta(seconds=30)
    assert scale(deployment, later) == (0, 0), "not idle yet: the request was 30 s ago"
    assert scale(deployment, later + timedelta(seconds=31)) == (0, 1)
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.IDLE and live(deployment) == []
    assert Job.objects.get(pk=replica.pk).cancel_requested_at is not None


def test_requests_piling_up_on_the_ready_replicas_add_one_up_to_the_maximum(deploy):
    deployment = deploy(min_replicas=1, max_replicas=2)
    made_ready(live(deployment)[0])
    wake(deployment)
    assert scale_deployments(inflight={deployment.pk: 4}) == {"launched": 0, "stopped": 0}
    assert scale_deployments(inflight={deployment.pk: 5}) == {"launched": 1, "stopped": 0}
    assert scale_deployments(inflight={deployment.pk: 50}) == {"launched": 0, "stopped": 0}, "at its maximum"
    assert len(live(deployment)) == 2


def test_replicas_failing_to_start_three_times_in_a_row_fail_the_deployment(deploy):
    deployment = deploy(min_replicas=1)
    for attempt in range(3):
        [replica] = live(deployment)
        Job.objects.filter(pk=replica.pk).update(serving={"state": "failed", "error": f"out of memory ({attempt})"})
        lifecycle.fail(Job.objects.get(pk=replica.pk), "The engine exited")
        scale(deployment, timezone.now())
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.FAILED and live(deployment) == []
    assert "3 replicas in a row failed to start" in deployment.status_reason
    assert "out of memory (2)" in deployment.status_reason


def test_a_spent_total_budget_stops_the_deployment_and_its_replicas(deploy):
    deployment = deploy(min_replicas=1, total_budget=2_000_000)
    [replica] = live(deployment)
    node = Node.objects.get(hostname="a-4090")
    began = timezone.now() - timedelta(hours=2)
    set_price(node.pool.chip_type, began - timedelta(hours=1), 1_200_000)  # ¥1.20 an hour: ¥2.40 spent
    allocation = open_allocation(replica, node, start=began, chips=1)
    charge_allocation(allocation.pk)
    scale(deployment, timezone.now())
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.STOPPED and "total budget" in deployment.status_reason
    assert Job.objects.get(pk=replica.pk).cancel_requested_at is not None


def test_a_replica_stopped_for_credit_stops_the_deployment(deploy):
    deployment = deploy(min_replicas=1)
    [replica] = live(deployment)
    lifecycle.finish(replica, JobStatus.STOPPED_NO_CREDIT, "Out of credit")
    scale(deployment, timezone.now())
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.STOPPED and "out of credit" in deployment.status_reason
    assert live(deployment) == []


def test_a_replicas_rank_launch_carries_its_engine(deploy):
    deployment = deploy(min_replicas=1, max_model_len=256)
    [replica] = live(deployment)
    node = Node.objects.get(hostname="a-4090")
    replica.plan, replica.epoch = hand_plan((node, 1)), 1
    [(node_id, launch)] = rank_launches(replica, replica.plan, {node.pk: node})
    assert node_id == node.pk and launch.world_size == 1
    serve = launch.serve
    assert serve["served_model_name"] == "tiny-chat" and serve["port"] == 0
    assert serve["model"].startswith("store:models/") and serve["engine"] == "transformers"
    assert serve["simulated"] is True and serve["device"] == "cpu" and serve["host"] == "127.0.0.1"
    assert serve["max_model_len"] == 256 and serve["deployment_id"] == deployment.pk and serve["replica"] == replica.pk
    assert launch.storage_grant, "the replica stages its model through a grant, as a training rank does"


def test_a_deployment_starting_at_zero_is_still_refused_a_budget_no_replica_could_run_on(deploy):
    with pytest.raises(DeploymentRefused) as refused:
        deploy(min_replicas=0, max_budget_per_hour=1)
    assert refused.value.field == "max_budget_per_hour" and refused.value.code == "budget_too_low"
    assert not Deployment.objects.exists()


def test_a_longest_request_past_the_models_context_is_refused_by_name(deploy):
    with pytest.raises(DeploymentRefused) as refused:
        deploy(max_model_len=4096)  # llama-tiny's config, as the test upload has it: 2048 tokens
    assert refused.value.field == "max_model_len" and "context (2048 tokens)" in str(refused.value)


def test_a_request_held_through_a_cold_start_keeps_its_starting_replica_past_the_idle_timeout(deploy):
    deployment = deploy(min_replicas=0, idle_timeout_s=60)
    wake(deployment)
    [starting] = live(deployment)
    much_later = timezone.now() + timedelta(minutes=5)
    assert scale(deployment, much_later, waiting=1) == (0, 0), "a request waits for it"
    assert scale(deployment, much_later, waiting=0) == (0, 1)

"""`/api/v1/deployments/`: deploy a model as replica jobs, list, follow, scale and stop it; every refusal names
its field (docs/SERVING.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.services.meter import charge_allocation
from fleet.choices import JobStatus
from fleet.models import Deployment, DeploymentStatus, Job, Node
from kernel.money import format_amount
from tests.support.deployments import DEPLOYMENT, servable_model
from tests.support.jobs import JOB_SPEC
from tests.support.meter import open_allocation
from workers.services.deployments import record_request

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(alice, fund, api_for, small_fleet, no_celery):
    """Alice with credit and a token, three simulated chips online; launched jobs stay queued."""
    fund(alice)
    return api_for(alice)


@pytest.fixture
def model(alice) -> str:
    return servable_model(alice).reference


def deploy(api, reference: str, **fields):
    return api.post("/api/v1/deployments/", {**DEPLOYMENT, "model": reference, **fields}, format="json")


def deployed(api, reference: str, **fields) -> dict:
    response = deploy(api, reference, **fields)
    assert response.status_code == 201, response.json()
    return response.json()


# -- create ----------------------------------------------------------------------------------------


def test_a_deployment_launches_its_minimum_of_replicas_as_jobs(api, model):
    body = deployed(api, model, min_replicas=2, max_replicas=3)

    replicas = Job.objects.filter(deployment_id=body["id"]).order_by("pk")
    assert [job.status for job in replicas] == [JobStatus.QUEUED, JobStatus.QUEUED]
    assert all(job.owner.username == "alice" and job.credit_hold > 0 for job in replicas)
    assert body["status"] == "deploying" and body["model"] == model
    assert [replica["job"] for replica in body["replicas"]] == [job.pk for job in replicas]
    assert body["replicas"][0]["status"] == "queued", body["replicas"]
    assert body["replicas"][0]["serving_state"] == "queued", body["replicas"]  # until its engine reports
    assert body["endpoint"] == {"base_url": "http://testserver/v1", "model": "tiny-chat"}
    assert (body["max_budget"], body["min_replicas"], body["max_replicas"]) == ("28.00", 2, 3)


def test_a_minimum_of_zero_starts_no_replica_and_is_idle(api, model):
    body = deployed(api, model, min_replicas=0)

    assert body["status"] == "idle" and body["replicas"] == []
    assert not Job.objects.filter(deployment_id=body["id"]).exists()


def test_a_chip_and_spot_terms_are_kept(api, model):
    body = deployed(api, model, chip="rtx-4090", spot=True, spot_bid="1.50", total_budget="50", max_model_len=512)

    deployment = Deployment.objects.get(pk=body["id"])
    assert (deployment.chip, deployment.spot, deployment.spot_bid_per_hour) == ("rtx-4090", True, 1_500_000)
    assert (deployment.total_budget, deployment.max_model_len) == (50_000_000, 512)
    assert (body["chip"], body["spot_bid"], body["total_budget"]) == ("rtx-4090", "1.50", "50.00")


# -- refusals: 400 naming the field, and nothing kept -----------------------------------------------

REFUSALS = [
    ({"name": "no spaces"}, "name", "invalid"),
    ({"name": "a/b"}, "name", "invalid"),
    ({"min_replicas": 3, "max_replicas": 2}, "min_replicas", "invalid"),
    ({"max_replicas": 9}, "max_replicas", "max_value"),
    ({"idle_timeout_s": 5}, "idle_timeout_s", "invalid"),
    ({"idle_timeout_s": 0}, "idle_timeout_s", "min_value"),
    ({"chip": "no-such-chip"}, "chip", "invalid"),
    ({"model": "llama-tiny"}, "model", "model_not_servable"),
    ({"model": "model:999999"}, "model", "model_unavailable"),
    ({"max_budget": "0.000001"}, "max_budget", "budget_too_low"),
    ({"spot": True}, "spot_bid", "invalid"),
    ({"spot_bid": "1.00"}, "spot_bid", "invalid"),
    ({"chips_per_replica": 2}, "chips_per_replica", "invalid"),
    ({"replica_count": 2}, "replica_count", "unknown_field"),
]


@pytest.mark.parametrize(("fields", "field", "code"), REFUSALS, ids=[f"{r[1]}-{r[2]}" for r in REFUSALS])
def test_a_bad_value_is_a_400_naming_its_field_and_nothing_is_kept(api, model, fields, field, code):
    response = deploy(api, model, **fields)

    assert response.status_code == 400, response.json()
    assert list(response.json()["errors"]) == [field] and response.json()["code"] == code, response.json()
    assert not Deployment.objects.exists() and not Job.objects.exists()


def test_a_name_is_refused_while_a_live_deployment_has_it_and_free_once_stopped(api, model):
    first = deployed(api, model)

    taken = deploy(api, model)
    assert taken.status_code == 400 and taken.json()["code"] == "name_taken"
    assert "tiny-chat" in taken.json()["errors"]["name"][0]

    api.delete(f"/api/v1/deployments/{first['id']}/")
    assert deploy(api, model).status_code == 201


def test_a_deployment_beyond_the_balance_is_refused_by_the_balance(alice, api_for, small_fleet, no_celery, model):
    response = deploy(api_for(alice), model)

    assert response.status_code == 400 and response.json()["code"] == "insufficient_credit"
    assert "balance" in response.json()["errors"] and not Deployment.objects.exists()


# -- list and get ----------------------------------------------------------------------------------


def test_the_list_holds_only_your_deployments_newest_first(api, model, bob, fund, api_for):
    fund(bob)
    theirs = deployed(api_for(bob), servable_model(bob).reference, name="bobs", min_replicas=0)
    older = deployed(api, model, name="older", min_replicas=0)
    newer = deployed(api, model, name="newer", min_replicas=0)

    listed = api.get("/api/v1/deployments/").json()

    assert [row["id"] for row in listed["results"]] == [newer["id"], older["id"]]
    assert theirs["id"] not in {row["id"] for row in listed["results"]}
    assert [row["name"] for row in api.get("/api/v1/deployments/?name=older").json()["results"]] == ["older"]
    assert api.get("/api/v1/deployments/?status=ready").json()["results"] == []


def test_a_deployment_shows_its_requests_tokens_cost_and_price_per_million_tokens(api, model):
    body = deployed(api, model, min_replicas=1)
    deployment = Deployment.objects.get(pk=body["id"])
    replica = deployment.replicas.get()
    Job.objects.filter(pk=replica.pk).update(status=JobStatus.RUNNING)
    start = timezone.now() - timedelta(hours=1)
    allocation = open_allocation(replica, Node.objects.get(hostname="a-4090"), start=start, chips=1)
    charge_allocation(allocation.pk, start + timedelta(hours=1))
    record_request(
        deployment, route="chat", status_code=200, prompt_tokens=600_000, completion_tokens=400_000,
        started_at=timezone.now(), duration_ms=20.0,
    )  # fmt: skip

    shown = api.get(f"/api/v1/deployments/{deployment.pk}/").json()

    charged = sum(line.charged_total for line in replica.billing_lines.all())
    assert charged > 0
    assert (shown["requests"], shown["prompt_tokens"], shown["completion_tokens"]) == (1, 600_000, 400_000)
    assert shown["cost"] == format_amount(charged)
    assert shown["price_per_million_tokens"] == shown["cost"]  # a million tokens served
    assert shown["last_request_at"] is None  # the gateway's wake() sets it, not the record


def test_a_replica_shows_its_engine_state_and_chip(api, model):
    body = deployed(api, model)
    replica = Job.objects.get(deployment_id=body["id"])
    replica.serving = {"state": "ready", "engine": "transformers", "simulated": True, "url": "http://10.0.0.1:9/v1"}
    replica.save(update_fields=["serving"])

    shown = api.get(f"/api/v1/deployments/{body['id']}/").json()["replicas"]

    assert shown == [
        {
            "job": replica.pk,
            "status": "queued",
            "serving_state": "ready",
            "engine": "transformers",
            "simulated": True,
            "chip_type": replica.plan.ranks[0].chip if replica.plan else None,
            "started_at": None,
        }
    ]  # the engine's own address is the gateway's business, never shown


# -- scale -----------------------------------------------------------------------------------------


def test_raising_the_minimum_launches_a_replica_now(api, model):
    body = deployed(api, model, min_replicas=1, max_replicas=3)

    response = api.patch(f"/api/v1/deployments/{body['id']}/", {"min_replicas": 2}, format="json")

    assert response.status_code == 200, response.json()
    assert (response.json()["min_replicas"], response.json()["max_replicas"]) == (2, 3)
    assert len(response.json()["replicas"]) == 2 == Job.objects.filter(deployment_id=body["id"]).count()


def test_a_new_idle_timeout_is_kept(api, model):
    body = deployed(api, model)

    response = api.patch(f"/api/v1/deployments/{body['id']}/", {"idle_timeout_s": 600}, format="json")

    assert response.json()["idle_timeout_s"] == 600 == Deployment.objects.get().idle_timeout_s


@pytest.mark.parametrize(
    ("change", "field", "code"),
    [
        ({"min_replicas": 3}, "min_replicas", "invalid"),  # above the maximum of 2
        ({"max_replicas": 0}, "max_replicas", "min_value"),
        ({"idle_timeout_s": 10}, "idle_timeout_s", "invalid"),
        ({"name": "renamed"}, "name", "unknown_field"),
    ],
)
def test_a_bad_change_is_a_400_naming_its_field(api, model, change, field, code):
    body = deployed(api, model)

    response = api.patch(f"/api/v1/deployments/{body['id']}/", change, format="json")

    assert response.status_code == 400 and list(response.json()["errors"]) == [field], response.json()
    assert response.json()["code"] == code
    assert Deployment.objects.get().min_replicas == 1


def test_a_stopped_deployment_cannot_be_scaled(api, model):
    body = deployed(api, model)
    api.delete(f"/api/v1/deployments/{body['id']}/")

    response = api.patch(f"/api/v1/deployments/{body['id']}/", {"min_replicas": 0}, format="json")

    assert response.status_code == 409 and response.json()["code"] == "deployment_stopped"


# -- stop ------------------------------------------------------------------------------------------


def test_deleting_stops_the_deployment_and_cancels_its_replicas(api, model):
    body = deployed(api, model, min_replicas=2)

    response = api.delete(f"/api/v1/deployments/{body['id']}/")

    assert response.status_code == 200
    assert response.json()["status"] == "stopped" and response.json()["stopped_at"]
    replicas = Job.objects.filter(deployment_id=body["id"])
    assert all(job.cancel_requested_at for job in replicas)
    assert {job.status for job in replicas} == {JobStatus.CANCELLED}  # queued ones end at once
    assert Deployment.objects.get().status == DeploymentStatus.STOPPED
    assert api.delete(f"/api/v1/deployments/{body['id']}/").json()["status"] == "stopped"  # again: no change


# -- another user's, and the jobs list ---------------------------------------------------------------


def test_another_users_deployment_is_404_to_read_scale_and_stop(api, model, bob, api_for):
    body = deployed(api, model)
    url = f"/api/v1/deployments/{body['id']}/"
    bob_api = api_for(bob)

    assert bob_api.get(url).status_code == 404
    assert bob_api.patch(url, {"min_replicas": 0}, format="json").status_code == 404
    assert bob_api.delete(url).status_code == 404
    assert bob_api.get("/api/v1/deployments/").json()["results"] == []
    assert Deployment.objects.get().status == DeploymentStatus.DEPLOYING


def test_deploying_someone_elses_model_is_refused(api, bob):
    response = deploy(api, servable_model(bob).reference)

    assert response.status_code == 400 and response.json()["code"] == "model_unavailable"


def test_replica_jobs_are_not_in_the_jobs_list(api, model):
    body = deployed(api, model, min_replicas=2)
    training = api.post("/api/v1/jobs/", JOB_SPEC, format="json").json()

    listed = api.get("/api/v1/jobs/").json()["results"]

    assert [job["id"] for job in listed] == [training["id"]]
    replica = Job.objects.filter(deployment_id=body["id"]).first()
    assert api.get(f"/api/v1/jobs/{replica.pk}/").status_code == 200  # still readable by id: its log, its events

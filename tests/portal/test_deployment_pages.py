"""The deployment pages (docs/SERVING.md, "Pages"): the Deploy buttons and the deploy form (each refusal of the
service on its field), the list, the deployment page (endpoint, replicas with simulated ones labelled, counters,
cost, logs, charts' data), scaling, delete, the playground; another user's deployment is a 404."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from billing.models import BillingLine
from billing.services.credits import adjust_credit
from billing.services.ledger import balance_of
from fleet.choices import JobStatus
from fleet.models import ChipType, Deployment, DeploymentStatus, Job, UploadedModel
from tests.support.deployment_pages import make_deployment, make_replica, replica_plan, trained_job
from workers.models import JobLogLine
from workers.services.deployments import record_request

pytestmark = pytest.mark.django_db

DEPLOY = {
    "name": "tiny-chat",
    "chip": "",
    "chips_per_replica": "1",
    "max_budget_per_hour": "10",
    "min_replicas": "1",
    "max_replicas": "2",
    "idle_timeout": "5",
    "idle_unit": "min",
}
READY = {"state": "ready", "url": "http://127.0.0.1:9/v1", "engine": "transformers", "simulated": True, "device": "cpu"}


@pytest.fixture
def served_job(alice, own_store, tmp_path) -> Job:
    return trained_job(alice, tmp_path)


@pytest.fixture
def deploy(alice_client, served_job, seeded_nodes_online, no_scheduling):
    def post(**changes):
        return alice_client.post("/deployments/new/", {**DEPLOY, "model": f"job:{served_job.pk}", **changes})

    return post


def field_errors(html: str, field: str) -> str:
    """The text of the errors shown under one field of the form."""
    return " ".join(re.findall(rf'<p class="field-error" id="id_{field}_error">(.*?)</p>', html, re.S))


def test_the_job_page_of_a_finished_job_with_a_model_has_a_deploy_button(alice_client, served_job, catalog):
    html = alice_client.get(f"/jobs/{served_job.pk}/").content.decode()

    assert f'href="/deployments/new/?model=job%3A{served_job.pk}" data-testid="deploy-job">Deploy</a>' in html


def test_an_uploaded_model_has_a_deploy_button(alice_client, alice):
    model = UploadedModel.objects.create(
        owner=alice, name="mine", architecture="llama", parameters=1, size_bytes=1, config={}, shape={},
        store_prefix="models/1/x",
    )  # fmt: skip

    html = alice_client.get("/models/").content.decode()

    assert f'href="/deployments/new/?model=model%3A{model.pk}" data-testid="deploy-model">Deploy</a>' in html


def test_the_deploy_form_is_filled_in_from_the_model_it_was_opened_for(alice_client, served_job, seeded_nodes_online):
    make_deployment(served_job.owner, name="tiny-chat-run", min_replicas=0)

    html = alice_client.get(f"/deployments/new/?model=job:{served_job.pk}").content.decode()

    assert f'value="job:{served_job.pk}"' in html
    assert 'value="tiny-chat-run-2"' in html  # from the job's name, free among the live deployments
    assert '<option value="" selected>Let the planner choose</option>' in html
    assert re.search(r'<option value="tpu-v5e">Google TPU v5e · ¥[\d.]+/h · \d+ free</option>', html)


def test_a_deployment_made_on_the_form_opens_its_page(deploy, alice, served_job):
    response = deploy(spot="on", spot_bid="1.5", max_model_len="512")

    deployment = Deployment.objects.get(owner=alice)
    assert response.status_code == 302 and response["Location"] == f"/deployments/{deployment.pk}/"
    assert (deployment.name, deployment.model_name) == ("tiny-chat", f"job:{served_job.pk}")
    assert (deployment.max_budget_per_hour, deployment.spot_bid_per_hour) == (10_000_000, 1_500_000)
    assert (deployment.min_replicas, deployment.max_replicas, deployment.idle_timeout_s) == (1, 2, 300)
    assert deployment.spot and deployment.max_model_len == 512
    assert deployment.replicas.get().status == JobStatus.QUEUED


def test_a_minimum_of_zero_and_an_idle_timeout_in_seconds_deploy_with_no_replica(deploy, alice):
    deploy(min_replicas="0", idle_timeout="45", idle_unit="s")

    deployment = Deployment.objects.get(owner=alice)
    assert (deployment.status, deployment.idle_timeout_s) == (DeploymentStatus.IDLE, 45)
    assert not deployment.replicas.exists()


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"name": "my chat!"}, "name", "A deployment&#x27;s name is 1 to 64 letters"),
        ({"model": "llama-tiny"}, "model", "is a built-in model"),
        ({"model": "model:999999"}, "model", "There is no model model:999999 among yours"),
        ({"max_replicas": "9"}, "max_replicas", "max_replicas must be 1 to 8"),
        ({"min_replicas": "3"}, "min_replicas", "min_replicas must be 0 to max_replicas (2)"),
        ({"idle_timeout": "10", "idle_unit": "s"}, "idle_timeout", "idle_timeout_s must be 30 to 604800 seconds"),
        ({"max_budget_per_hour": "0.01"}, "max_budget_per_hour", "budget"),
        ({"chip": "tpu-v5e", "chips_per_replica": "100"}, "chip", "100 × tpu-v5e asked"),
    ],
)
def test_each_refusal_shows_on_its_field_and_keeps_nothing(deploy, changes, field, says):
    response = deploy(**changes)

    assert response.status_code == 400
    assert says in field_errors(response.content.decode(), field)
    assert not Deployment.objects.exists()


def test_a_name_already_taken_is_refused_on_the_name(deploy, alice):
    make_deployment(alice, name="tiny-chat", min_replicas=0)

    response = deploy()

    errors = field_errors(response.content.decode(), "name")
    assert "You already have a deployment named &#x27;tiny-chat&#x27;." in errors


def test_a_balance_too_low_is_refused_above_the_form(deploy, alice):
    adjust_credit(alice, -balance_of(alice), reason="empty the wallet", actor=None, key="empty")

    response = deploy()

    html = response.content.decode()
    assert response.status_code == 400 and 'class="message message-error" role="alert"' in html
    assert "balance" in html.split('role="alert"')[1].split("</div>")[0].lower()


def test_the_list_shows_the_users_deployments_and_is_in_the_navigation(alice_client, alice, bob):
    mine = make_deployment(alice, name="tiny-chat", requests=12)
    make_replica(mine, READY)
    make_deployment(bob, name="bobs-chat")

    html = alice_client.get("/deployments/").content.decode()

    assert 'href="/deployments/" aria-current="page">Deployments</a>' in html
    assert f'href="/deployments/{mine.pk}/">tiny-chat</a>' in html and "bobs-chat" not in html
    row = html.split(f'data-deployment="{mine.pk}"')[1].split("</tr>")[0]
    assert "Deploying" in row and ">12<" in row and "1 <span" in row


def test_the_deployment_page_shows_its_endpoint_replicas_counters_cost_and_logs(alice_client, alice, catalog):
    deployment = make_deployment(alice, name="tiny-chat", status=DeploymentStatus.READY)
    replica = make_replica(deployment, READY)
    record_request(
        deployment, route="chat", status_code=200, prompt_tokens=300_000, completion_tokens=700_000,
        started_at=timezone.now(), first_byte_ms=120.0, duration_ms=900.0,
    )  # fmt: skip
    BillingLine.objects.create(
        job=replica, chip_type=ChipType.objects.get(slug="tpu-v5e"), mode="on_demand",
        billed_through=timezone.now(), charged_total=2_500_000,
    )  # fmt: skip
    JobLogLine.objects.create(job=replica, epoch=1, rank=0, line="engine ready on <run>", created_at=timezone.now())

    html = alice_client.get(f"/deployments/{deployment.pk}/").content.decode()

    assert '<code id="endpoint-base">http://testserver/v1</code>' in html
    assert "curl http://testserver/v1/chat/completions" in html and "&quot;model&quot;: &quot;tiny-chat&quot;" in html
    assert 'base_url="http://testserver/v1"' in html.replace("&quot;", '"')
    row = html.split(f'data-replica="{replica.pk}"')[1].split("</tr>")[0]
    assert "Running" in row and "engine ready" in row and "transformers" in row and "Google TPU v5e" in row
    assert 'data-testid="simulated"' in row and ">simulated</span>" in row
    assert '<dd data-testid="requests">1</dd>' in html
    assert '<dd data-testid="completion-tokens">700000</dd>' in html
    assert "¥2.50" in html.split('data-testid="cost"')[1].split("</dd>")[0]
    assert "¥2.50" in html.split('data-testid="price-per-million"')[1].split("</dd>")[0]  # ¥2.50 over 1M tokens
    assert f"job {replica.pk}</span> engine ready on &lt;run&gt;" in html


def test_a_replica_on_a_real_chip_is_not_labelled_simulated(alice_client, alice, catalog):
    deployment = make_deployment(alice)
    real = {**READY, "simulated": False, "device": "cuda:0", "engine": "vllm"}
    make_replica(deployment, real, plan=replica_plan("h100", "gpu-01", simulated=False))

    html = alice_client.get(f"/deployments/{deployment.pk}/").content.decode()

    assert "vllm" in html and 'data-testid="simulated"' not in html


def test_the_live_section_polls_while_the_deployment_is_live_and_stops_once_stopped(alice_client, alice):
    deployment = make_deployment(alice)

    live = alice_client.get(f"/deployments/{deployment.pk}/live/").content.decode()
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.STOPPED, status_reason="Deleted")
    stopped = alice_client.get(f"/deployments/{deployment.pk}/live/").content.decode()

    assert 'hx-trigger="every 3s"' in live
    assert "hx-trigger" not in stopped and "Deleted" in stopped


def test_the_metrics_give_median_latency_and_throughput_per_time_bucket(alice_client, alice):
    deployment = make_deployment(alice)
    start = timezone.now() - timedelta(minutes=2)
    for first_byte, duration, tokens in ((100.0, 1000.0, 10), (300.0, 2000.0, 40), (200.0, 3000.0, 30)):
        record_request(
            deployment, route="chat", status_code=200, completion_tokens=tokens, started_at=start,
            first_byte_ms=first_byte, duration_ms=duration,
        )  # fmt: skip

    body = alice_client.get(f"/deployments/{deployment.pk}/metrics.json").json()

    assert body["bucket_s"] == 30 and len(body["points"]) == 1  # 15 minutes at least, in at most 60 buckets
    point = body["points"][0]
    assert (point["requests"], point["first_byte_p50_ms"], point["duration_p50_ms"]) == (3, 200.0, 2000.0)
    assert point["tokens_per_s"] == round(80 / 30, 3)  # 80 tokens in a 30 s bucket
    assert point["request_tokens_per_s_p50"] == 10.0  # 10/s, 20/s, 10/s


def test_the_scale_form_changes_the_replica_bounds(alice_client, alice, no_scheduling):
    deployment = make_deployment(alice, min_replicas=0, max_replicas=1, status=DeploymentStatus.IDLE)

    response = alice_client.post(
        f"/deployments/{deployment.pk}/replicas/", {"min_replicas": "0", "max_replicas": "3", "idle_timeout_s": "60"}
    )

    deployment.refresh_from_db()
    assert response.status_code == 302 and response["Location"] == f"/deployments/{deployment.pk}/"
    assert (deployment.min_replicas, deployment.max_replicas, deployment.idle_timeout_s) == (0, 3, 60)


def test_a_refused_scale_shows_on_its_field(alice_client, alice):
    deployment = make_deployment(alice, min_replicas=0, status=DeploymentStatus.IDLE)

    response = alice_client.post(
        f"/deployments/{deployment.pk}/replicas/", {"min_replicas": "0", "max_replicas": "20", "idle_timeout_s": "60"}
    )

    assert response.status_code == 400
    assert "max_replicas must be 1 to 8" in field_errors(response.content.decode(), "max_replicas")
    assert Deployment.objects.get(pk=deployment.pk).max_replicas == 1


def test_delete_stops_the_deployment_and_cancels_its_replicas(alice_client, alice):
    deployment = make_deployment(alice, status=DeploymentStatus.READY)
    replica = make_replica(deployment, READY, status=JobStatus.QUEUED)

    response = alice_client.post(f"/deployments/{deployment.pk}/delete/", HTTP_HX_REQUEST="true")

    deployment.refresh_from_db()
    assert response.status_code == 200 and response["HX-Redirect"] == "/deployments/"
    assert (deployment.status, deployment.status_reason) == (DeploymentStatus.STOPPED, "Deleted by its owner")
    assert Job.objects.get(pk=replica.pk).status == JobStatus.CANCELLED
    page = alice_client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert 'data-testid="delete"' not in page and 'data-testid="replicas-form"' not in page


def test_the_delete_button_asks_for_confirmation(alice_client, alice):
    deployment = make_deployment(alice)

    html = alice_client.get(f"/deployments/{deployment.pk}/").content.decode()

    assert 'hx-confirm="Delete “tiny-chat”? Its replicas stop' in html


def test_the_playground_streams_to_the_gateway_with_the_deployments_name(alice_client, alice):
    deployment = make_deployment(alice)

    html = alice_client.get(f"/deployments/{deployment.pk}/playground/").content.decode()

    assert 'data-model="tiny-chat" data-url="/v1/chat/completions"' in html
    assert 'src="/static/js/playground.js"' in html and 'name="csrfmiddlewaretoken"' in html


def test_a_stopped_deployments_playground_says_so_and_sends_nothing(alice_client, alice):
    deployment = make_deployment(alice, status=DeploymentStatus.STOPPED)

    html = alice_client.get(f"/deployments/{deployment.pk}/playground/").content.decode()

    assert "“tiny-chat” is stopped: it answers no requests." in html
    assert 'data-testid="chat-send" disabled' in html


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", ""),
        ("get", "live/"),
        ("get", "metrics.json"),
        ("get", "playground/"),
        ("post", "replicas/"),
        ("post", "delete/"),
    ],
)
def test_another_users_deployment_is_not_found(alice_client, bob, method, path):
    theirs = make_deployment(bob)

    response = getattr(alice_client, method)(f"/deployments/{theirs.pk}/{path}")

    assert response.status_code == 404
    assert Deployment.objects.get(pk=theirs.pk).status == DeploymentStatus.DEPLOYING


def test_the_pages_need_a_login():
    assert Client().get("/deployments/")["Location"].startswith("/accounts/login/")
    assert Client().get("/deployments/new/")["Location"].startswith("/accounts/login/")

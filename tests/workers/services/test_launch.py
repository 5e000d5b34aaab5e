"""One launch for the API and the train page, and no total budget that stops a job at once (docs/RELIABILITY.md #8).

A job is stopped when its total budget would be spent within the stop margin (two minutes by
default); a total budget below that much of the plan's spend stopped the job as soon as it ran.
It is refused at launch now, naming the minimum.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from tests.support.spot import launch_fields, online_node
from workers.services import monitor
from workers.services.launch import LaunchRefused, launch
from workers.services.scheduling import schedule

pytestmark = pytest.mark.django_db

ONE_4090 = {**JOB_SPEC, "chip_counts": {"rtx-4090": 1}}  # 1.20/h: two minutes cost 0.04
PAGE_LAUNCH = {
    "model": "llama-tiny",
    "dataset": "synthetic",
    "policy": "cost-performance",
    "max_budget": "28",
    "max_steps": "100",
    "per_device_batch_size": "4",
    "chips_rtx-4090": "1",
}


@pytest.fixture
def funded_alice_and_a_node(alice, fund, catalog):
    fund(alice, "100")
    online_node("od-4090", "rtx-4090", spot=False)
    return alice


def test_a_total_budget_below_two_minutes_of_spend_is_refused_naming_the_minimum(funded_alice_and_a_node, no_celery):
    response = token_client(funded_alice_and_a_node).post(
        "/api/v1/jobs/", {**ONE_4090, "total_budget": "0.04"}, format="json"
    )

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "budget_too_low"
    (message,) = body["errors"]["total_budget"]
    assert "not more than 2 minutes of this plan's spend (¥0.04 at ¥1.20/h)" in message
    assert "Set a total budget above ¥0.04." in message
    assert not Job.objects.exists() and not no_celery


def test_a_total_budget_above_the_stop_margin_runs_and_is_not_stopped_at_once(funded_alice_and_a_node, no_celery):
    response = token_client(funded_alice_and_a_node).post(
        "/api/v1/jobs/", {**ONE_4090, "total_budget": "0.05"}, format="json"
    )
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])

    assert schedule(job.pk)
    assert monitor.stop_jobs_out_of_credit(timezone.now()) == 0
    job.refresh_from_db()
    assert job.status == JobStatus.PROVISIONING


def test_launch_refusals_are_typed_with_the_field_and_code_the_api_and_page_use(funded_alice_and_a_node):
    with pytest.raises(LaunchRefused) as refused:
        launch(funded_alice_and_a_node, launch_fields(total_budget=10_000))
    assert (refused.value.field, refused.value.code, refused.value.title) == (
        "total_budget",
        "budget_too_low",
        "Budget too low",
    )


def test_the_page_and_the_api_refuse_the_same_launch_the_same_way(client, funded_alice_and_a_node, settings, no_celery):
    settings.MAX_QUEUED_JOBS_PER_USER = 1
    api = token_client(funded_alice_and_a_node)
    assert api.post("/api/v1/jobs/", ONE_4090, format="json").status_code == 201

    over_api = api.post("/api/v1/jobs/", ONE_4090, format="json")
    client.force_login(funded_alice_and_a_node)
    over_page = client.post(reverse("train"), PAGE_LAUNCH)

    assert over_api.status_code == 400 and over_api.json()["code"] == "too_many_queued"
    message = over_api.json()["errors"]["non_field_errors"][0]
    assert over_page.status_code == 200
    assert f"Too many queued jobs: {message}" in over_page.content.decode().replace("&#x27;", "'")
    assert Job.objects.filter(owner=funded_alice_and_a_node).count() == 1


def test_the_page_launches_through_the_same_checks_and_holds_credit(client, funded_alice_and_a_node, no_celery):
    client.force_login(funded_alice_and_a_node)
    response = client.post(reverse("train"), PAGE_LAUNCH)

    assert response.status_code == 302
    job = Job.objects.get(owner=funded_alice_and_a_node)
    assert job.status == JobStatus.QUEUED and job.credit_hold == 100_000  # 5 minutes of 1.20/h

"""The jobs, quotes and datasets API: validation that names the field, owner scoping, cancel."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from fleet.choices import JobStatus
from fleet.models import Dataset, Job
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from tests.support.plans import hand_plan
from tests.support.stored import own_store_url, stored_checkpoint
from workers.models import JobEvent, JobLogLine, JobMetric
from workers.services.placement import allocate
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

SPEC = JOB_SPEC


@pytest.fixture
def api_as():
    return token_client


@pytest.fixture(autouse=True)
def users_have_credit(fund, alice, bob):
    """A launch needs the balance to hold a few minutes of its plan."""
    fund(alice)
    fund(bob)


@pytest.fixture
def online_fleet(enroll):
    return [
        enroll("f-4090", "rtx-4090", chips=2)[0],
        enroll("f-v5e", "tpu-v5e")[0],
        enroll("f-910b", "ascend-910b")[0],
    ]


def test_a_quote_returns_the_plan_and_the_single_type_baseline(api_as, alice, online_fleet):
    response = api_as(alice).post("/api/v1/quotes/", {**SPEC, "policy": "fastest"}, format="json")
    assert response.status_code == 200, response.json()
    plan = response.json()
    assert plan["ranks"] and plan["zero_stage"] == 0
    assert {rank["chip"] for rank in plan["ranks"]} == {"rtx-4090", "tpu-v5e", "ascend-910b"}
    assert all(rank["simulated"] for rank in plan["ranks"])
    assert isinstance(plan["price_per_hour"], str) and "." in plan["price_per_hour"]
    assert plan["baseline"] and plan["speedup_vs_baseline"] > 1


def test_a_hub_id_is_never_quietly_replaced_by_a_catalog_model(api_as, alice, online_fleet, tmp_path, monkeypatch):
    """Not in the platform's Hugging Face cache: a 400 naming the id and how to upload it, nothing launched."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    api = api_as(alice)
    for path in ("/api/v1/quotes/", "/api/v1/jobs/"):
        answer = api.post(path, {**SPEC, "model": "meta-llama/Llama-2-70b-hf", "max_budget": "100000"}, format="json")
        assert answer.status_code == 400
        message = answer.json()["errors"]["model"][0]
        assert "'meta-llama/Llama-2-70b-hf'" in message and "starverse model upload" in message
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": "gpt-9"}, "model"),
        ({"dataset": "wikipedia-202403"}, "dataset"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 10**9}, "max_steps"),
        ({"per_device_batch_size": 0}, "per_device_batch_size"),
        ({"per_device_batch_size": 10**6}, "per_device_batch_size"),
        ({"max_budget": "-5"}, "max_budget"),
        ({"max_budget": "lots"}, "max_budget"),
        ({"policy": "random"}, "policy"),
        ({"chip_counts": {"tpu-v9": 1}}, "chip_counts"),
        ({"max_budget": "0.01"}, "max_budget"),
    ],
)
def test_a_bad_job_is_refused_naming_the_field_and_nothing_is_created(
    api_as, alice, online_fleet, no_celery, change, field
):
    response = api_as(alice).post("/api/v1/jobs/", {**SPEC, **change}, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert not Job.objects.exists() and not no_celery


def test_a_job_that_fits_no_chip_is_refused_on_the_model_field(api_as, alice, enroll, no_celery):
    enroll("small", "tpu-v5e")
    response = api_as(alice).post(
        "/api/v1/jobs/", {**SPEC, "model": "llama-2-70b", "max_budget": "100000"}, format="json"
    )
    assert response.status_code == 400
    assert "model" in response.json()["errors"]


def test_a_valid_job_is_queued_and_scheduled_after_commit(
    api_as, alice, online_fleet, no_celery, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(alice).post("/api/v1/jobs/", SPEC, format="json")
    assert response.status_code == 201
    job = Job.objects.get()
    assert (job.status, job.owner, job.max_budget_per_hour) == (JobStatus.QUEUED, alice, 28_000_000)
    assert no_celery == [job.pk]
    assert response.json()["max_budget"] == "28.00"


def test_a_job_waits_in_the_queue_when_no_chips_are_free(api_as, alice, bob, enroll, no_celery):
    node, _ = enroll("busy", "rtx-4090", chips=1)
    busy = Job.objects.create(
        owner=bob, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000
    )
    Job.objects.filter(pk=busy.pk).update(status=JobStatus.PLANNING)
    allocate(busy, hand_plan((node, 4)))  # the fleet's only chip is taken
    response = api_as(alice).post("/api/v1/jobs/", SPEC, format="json")
    assert response.status_code == 201, response.json()
    assert Job.objects.get(owner=alice).status == JobStatus.QUEUED


def test_fields_a_user_must_not_set_are_ignored(api_as, alice, online_fleet, no_celery):
    response = api_as(alice).post(
        "/api/v1/jobs/",
        {**SPEC, "status": "succeeded", "step": 99, "epoch": 7, "owner": 12345},
        format="json",
    )
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.status, job.step, job.epoch, job.owner) == (JobStatus.QUEUED, 0, 0, alice)


def test_another_users_job_is_404_everywhere_and_absent_from_lists(api_as, alice, bob, enroll, planning_job):
    node, _ = enroll("n")
    job = planning_job()
    allocate(job, hand_plan((node, 2)))
    api = api_as(bob)
    for suffix in ["", "metrics/", "events/", "logs/", "artifacts/", "artifacts/step-1/model.pt"]:
        assert api.get(f"/api/v1/jobs/{job.pk}/{suffix}").status_code == 404, suffix
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 404
    assert api.get("/api/v1/jobs/").json()["count"] == 0
    assert api_as(alice).get("/api/v1/jobs/").json()["count"] == 1


def test_cancel_through_the_api(api_as, alice, planning_job):
    job = planning_job(status=JobStatus.QUEUED)
    response = api_as(alice).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


def test_metrics_events_and_logs_of_a_job(api_as, alice, enroll, planning_job):
    node, _ = enroll("n", chips=2)
    job = planning_job()
    allocate(job, hand_plan((node, 1), (node, 3)))
    for rank, tps in [(0, 100.0), (1, 300.0)]:
        JobMetric.objects.create(
            job=job,
            epoch=1,
            rank=rank,
            step=1,
            loss=3.0,
            tokens_per_s=tps,
            chip_type="rtx-4090",
            created_at=job.created_at,
        )
    JobLogLine.objects.create(job=job, epoch=1, rank=0, line="step 1", created_at=job.created_at)
    api = api_as(alice)
    metrics = api.get(f"/api/v1/jobs/{job.pk}/metrics/").json()
    assert metrics["steps"] == [{"step": 1, "epoch": 1, "loss": 3.0, "tokens_per_s": 400.0}]
    assert [r["micro_batch"] for r in metrics["ranks"]] == [1, 3]
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/").json()[0]["line"] == "step 1"
    kinds = [e["kind"] for e in api.get(f"/api/v1/jobs/{job.pk}/events/").json()]
    assert kinds == list(JobEvent.objects.filter(job=job).values_list("kind", flat=True)) and "placed" in kinds


def test_an_artifact_outside_the_jobs_folder_is_never_served(api_as, alice, planning_job, settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)
    job = planning_job()
    stored_checkpoint(job.pk + 1000, 1, {"secret.txt": b"not yours"}, tmp_path)
    platform_store().put_bytes("checkpoints/secret.txt", b"not yours")
    for path in ["../secret.txt", f"../job-{job.pk + 1000}/step-1/secret.txt", "step-1/../../secret.txt"]:
        response = api_as(alice).get(f"/api/v1/jobs/{job.pk}/artifacts/{path}")
        assert response.status_code == 404, path


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (b"", "empty.txt", "empty"),
        (b"\x00\x01\x02binary", "blob.txt", ""),
        (b'{"text": "a"}\nnot json\n', "x.jsonl", "line 2"),
    ],
)
def test_a_bad_dataset_upload_is_refused_and_nothing_is_stored(api_as, alice, content, name, message):
    response = api_as(alice).post("/api/v1/datasets/", {"file": SimpleUploadedFile(name, content)}, format="multipart")
    assert response.status_code == 400
    assert message in str(response.json()["errors"]["file"]).lower()
    assert not Dataset.objects.exists()


def test_a_good_dataset_upload_can_be_trained_on_by_its_owner_only(api_as, alice, bob, online_fleet, no_celery):
    text = "\n".join(f"line {i} of a small corpus for training" for i in range(200)).encode()
    response = api_as(alice).post(
        "/api/v1/datasets/", {"file": SimpleUploadedFile("corpus.txt", text)}, format="multipart"
    )
    assert response.status_code == 201, response.json()
    reference = response.json()["reference"]
    assert api_as(alice).post("/api/v1/quotes/", {**SPEC, "dataset": reference}, format="json").status_code == 200
    refused = api_as(bob).post("/api/v1/jobs/", {**SPEC, "dataset": reference}, format="json")
    assert refused.status_code == 400 and "dataset" in refused.json()["errors"]

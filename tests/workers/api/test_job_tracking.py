"""A job's tracking settings through the API (W&B, MLflow): accepted and shown without their secrets, which
are stored encrypted and reach only the rank that logs; a 400 naming each bad setting; and the TensorBoard
event files as one download, the owner's only."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from django.test import Client

from fleet.choices import JobStatus
from fleet.models import Job
from hosts.agent.commands import launch_from_dict
from kernel.storage.trees import upload_tree
from tests.support.accounts import token_client
from tests.support.jobs import JOB_SPEC
from tests.support.plans import hand_plan
from tests.support.stored import downloaded
from workers.services.placement import allocate
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

WANDB_KEY, MLFLOW_TOKEN = "wk-0123456789abcdef-secret", "mlf-token-secret-42"
TRACKING = {
    "wandb": {"project": "llama-runs", "entity": "acme", "api_key": WANDB_KEY},
    "mlflow": {"tracking_uri": "https://mlflow.example.com", "experiment": "tiny", "token": MLFLOW_TOKEN},
}


@pytest.fixture
def online_fleet(fund, alice, enroll):
    """Alice with credit, and one host of two RTX 4090s online."""
    fund(alice)
    return [enroll("h-4090", "rtx-4090", chips=2)[0]]


@pytest.fixture
def tracked_job(alice, online_fleet, no_celery) -> Job:
    response = token_client(alice).post("/api/v1/jobs/", {**JOB_SPEC, "tracking": TRACKING}, format="json")
    assert response.status_code == 201, response.json()
    assert WANDB_KEY not in response.content.decode() and MLFLOW_TOKEN not in response.content.decode()
    return Job.objects.get()


def test_the_settings_are_shown_without_their_secrets(alice, tracked_job):
    shown = token_client(alice).get(f"/api/v1/jobs/{tracked_job.pk}/").json()["tracking"]
    assert shown == {
        "wandb": {"project": "llama-runs", "entity": "acme", "mode": "online", "api_key_set": True},
        "mlflow": {"tracking_uri": "https://mlflow.example.com", "experiment": "tiny", "token_set": True},
    }
    listed = token_client(alice).get("/api/v1/jobs/").content.decode()
    assert WANDB_KEY not in listed and MLFLOW_TOKEN not in listed


def test_the_secrets_are_encrypted_on_the_row_and_absent_from_the_job_page(alice, tracked_job):
    row = json.dumps(Job.objects.values_list("tracking", flat=True).get(pk=tracked_job.pk))
    assert WANDB_KEY not in row and MLFLOW_TOKEN not in row
    client = Client()
    client.force_login(alice)
    page = client.get(f"/jobs/{tracked_job.pk}/")
    assert page.status_code == 200
    assert WANDB_KEY not in page.content.decode() and MLFLOW_TOKEN not in page.content.decode()


def test_only_the_rank_that_logs_gets_the_secrets(tracked_job, online_fleet):
    Job.objects.filter(pk=tracked_job.pk).update(status=JobStatus.PLANNING)  # as the scheduler takes it up
    assert allocate(tracked_job, hand_plan((online_fleet[0], 2), (online_fleet[0], 2)))
    ranks = tracked_job.commands.get(type="start").payload["ranks"]
    launches = sorted((launch_from_dict(rank) for rank in ranks), key=lambda launch: launch.rank)
    assert launches[0].tracking["wandb"]["api_key"] == WANDB_KEY
    assert launches[0].tracking["mlflow"]["token"] == MLFLOW_TOKEN
    assert [launch.tracking for launch in launches[1:]] == [None]
    events = json.dumps(list(tracked_job.events.values("message", "data")), default=str)
    assert WANDB_KEY not in events and MLFLOW_TOKEN not in events


def test_without_tracking_a_job_logs_to_tensorboard_only(alice, online_fleet, no_celery):
    response = token_client(alice).post("/api/v1/jobs/", JOB_SPEC, format="json")
    assert response.status_code == 201 and response.json()["tracking"] == {}


@pytest.mark.parametrize(
    ("tracking", "field"),
    [
        ({"wandb": {"api_key": WANDB_KEY}}, "project"),
        ({"wandb": {"project": "has space", "api_key": WANDB_KEY}}, "project"),
        ({"wandb": {"project": "p"}}, "api_key"),  # online needs a key
        ({"wandb": {"project": "p", "mode": "cloud", "api_key": WANDB_KEY}}, "mode"),
        ({"wandb": {"project": "p", "api_key": WANDB_KEY, "team": "x"}}, "team"),
        ({"mlflow": {"experiment": "e"}}, "tracking_uri"),
        ({"mlflow": {"tracking_uri": "ftp://host/x"}}, "tracking_uri"),
        ({"neptune": {"project": "p"}}, "neptune"),
        ("wandb", "tracking"),
    ],
)
def test_a_bad_setting_is_refused_naming_it_and_nothing_is_created(alice, online_fleet, no_celery, tracking, field):
    response = token_client(alice).post("/api/v1/jobs/", {**JOB_SPEC, "tracking": tracking}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert field in json.dumps(errors), errors
    assert WANDB_KEY not in response.content.decode()
    assert not Job.objects.exists() and not no_celery


def test_an_offline_wandb_run_needs_no_key(alice, online_fleet, no_celery):
    tracking = {"wandb": {"project": "p", "mode": "offline"}}
    response = token_client(alice).post("/api/v1/jobs/", {**JOB_SPEC, "tracking": tracking}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["tracking"]["wandb"]["api_key_set"] is False


@pytest.fixture
def job_with_tensorboard(alice, settings, tmp_path) -> Job:
    settings.STORAGE_URL = f"file://{tmp_path / 'store'}"
    job = Job.objects.create(
        owner=alice, name="done", model_name="llama-tiny", per_device_batch_size=4, max_steps=10,
        max_budget_per_hour=28_000_000,
    )  # fmt: skip
    for epoch in (1, 2):
        folder = tmp_path / f"tb-{epoch}"
        folder.mkdir()
        (folder / f"events.out.tfevents.{epoch}.host").write_bytes(b"event records %d" % epoch)
        upload_tree(platform_store(), f"checkpoints/job-{job.pk}/tensorboard/epoch-{epoch}", folder)
    return job


def test_the_tensorboard_folder_downloads_as_one_tar(alice, job_with_tensorboard):
    job = job_with_tensorboard
    response = token_client(alice).get(f"/api/v1/jobs/{job.pk}/tensorboard/")
    assert response.status_code == 200
    assert f'filename="job-{job.pk}-tensorboard.tar"' in response["Content-Disposition"]
    with tarfile.open(fileobj=io.BytesIO(downloaded(response))) as tar:
        files = {member.name: tar.extractfile(member).read() for member in tar.getmembers()}
    assert files == {
        f"job-{job.pk}-tensorboard/epoch-1/events.out.tfevents.1.host": b"event records 1",
        f"job-{job.pk}-tensorboard/epoch-2/events.out.tfevents.2.host": b"event records 2",
    }


def test_another_users_tensorboard_download_is_a_404(bob, job_with_tensorboard):
    response = token_client(bob).get(f"/api/v1/jobs/{job_with_tensorboard.pk}/tensorboard/")
    assert response.status_code == 404


def test_before_any_event_file_is_stored_the_download_is_a_404_saying_so(alice, settings, tmp_path):
    settings.STORAGE_URL = f"file://{tmp_path / 'store'}"
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=1
    )
    response = token_client(alice).get(f"/api/v1/jobs/{job.pk}/tensorboard/")
    assert response.status_code == 404
    assert "no TensorBoard files yet" in json.dumps(response.json()), response.json()


def test_the_job_page_links_the_tensorboard_logs_and_serves_them_to_the_owner_only(
    client, alice, bob, job_with_tensorboard
):
    job = job_with_tensorboard
    Job.objects.filter(pk=job.pk).update(latest_checkpoint=f"store:checkpoints/job-{job.pk}/step-10")
    client.force_login(alice)
    assert 'data-testid="tensorboard-logs"' in client.get(f"/jobs/{job.pk}/").content.decode()
    response = client.get(f"/jobs/{job.pk}/tensorboard.tar")
    assert response.status_code == 200 and b"event records 2" in downloaded(response)
    client.force_login(bob)
    assert client.get(f"/jobs/{job.pk}/tensorboard.tar").status_code == 404

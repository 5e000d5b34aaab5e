"""Every URL that `GET /api/v1/jobs/{id}/artifacts/` lists downloads that file, for its owner only."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from portal.models import ApiToken
from workers.models import Job

pytestmark = pytest.mark.django_db

FILES = {
    "step-100/model.pt": b"final weights",
    "step-100/config.json": b'{"hidden": 64}',
    "step-50/zero/mp_rank_00_model_states.pt": b"resumable state",
    "step-50/latest": b"step-50",
    "step-50/notes with space & 100%.txt": b"odd name",
}


def client_of(user) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)[1]}")


@pytest.fixture
def finished_job(alice, settings, tmp_path) -> Job:
    settings.CHECKPOINT_ROOT = tmp_path
    job = Job.objects.create(
        owner=alice, name="done", model_name="llama-tiny", per_device_batch_size=4, max_steps=100,
        max_budget_per_hour=28_000_000,
    )  # fmt: skip
    for relative, content in FILES.items():
        path = Path(tmp_path, f"job-{job.pk}", relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return job


def listed(client: Client, job: Job) -> list[dict]:
    response = client.get(f"/api/v1/jobs/{job.pk}/artifacts/")
    assert response.status_code == 200
    return response.json()


def test_every_listed_artifact_url_downloads_its_file(alice, finished_job):
    client = client_of(alice)
    artifacts = listed(client, finished_job)
    assert sorted(a["path"] for a in artifacts) == sorted(FILES)

    for artifact in artifacts:
        response = client.get(artifact["url"])  # the absolute URL as listed, followed as a client would

        assert response.status_code == 200, (artifact["url"], response.status_code)
        assert b"".join(response.streaming_content) == FILES[artifact["path"]]
        assert response["Content-Disposition"].startswith("attachment")


def test_the_final_model_and_its_config_are_listed_without_a_trailing_slash(alice, finished_job):
    urls = {a["path"]: a["url"] for a in listed(client_of(alice), finished_job)}

    assert urls["step-100/model.pt"] == f"http://testserver/api/v1/jobs/{finished_job.pk}/artifacts/step-100/model.pt"
    assert urls["step-100/config.json"].endswith("/step-100/config.json")


def test_another_user_following_the_listed_urls_gets_404s(alice, bob, finished_job):
    urls = [a["url"] for a in listed(client_of(alice), finished_job)]
    bobs = client_of(bob)

    assert [bobs.get(url).status_code for url in urls] == [404] * len(urls)


def test_without_a_token_the_listed_urls_are_401s(alice, finished_job):
    urls = [a["url"] for a in listed(client_of(alice), finished_job)]

    assert {Client().get(url).status_code for url in urls} == {401}


def test_a_missing_artifact_is_a_json_404(alice, finished_job):
    response = client_of(alice).get(f"/api/v1/jobs/{finished_job.pk}/artifacts/step-100/missing.json")

    assert response.status_code == 404 and response.json() == {"detail": "No such artifact."}

"""Every URL that `GET /api/v1/jobs/{id}/artifacts/` lists downloads that file, for its owner only: a 302 to a
short-lived presigned URL when the platform keeps files in S3, the file itself from a storage folder."""

from __future__ import annotations

import pytest
from django.test import Client

from fleet.models import Job
from kernel.storage.trees import upload_files
from portal.models import ApiToken
from tests.support.stored import downloaded, own_store_url, stored_checkpoint
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

FILES = {
    "step-100/model/model.safetensors": b"final weights",
    "step-100/model/config.json": b'{"hidden": 64}',
    "step-50/ds/mp_rank_00_model_states.pt": b"resumable state",
    "step-50/meta.json": b'{"step": 50}',
    "step-50/notes with space & 100%.txt": b"odd name",
    "step-50/universal/zero/w/fp32.pt": b"topology-free",
}


def client_of(user) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)[1]}")


@pytest.fixture(params=["s3", "folder"])
def stored_finished_job(request, alice, settings, tmp_path) -> Job:
    """A job whose checkpoints at steps 50 (with its universal form) and 100 are stored, in S3 and in a folder."""
    settings.STORAGE_URL = own_store_url(tmp_path) if request.param == "s3" else f"file://{tmp_path / 'folder'}"
    job = Job.objects.create(
        owner=alice, name="done", model_name="llama-tiny", per_device_batch_size=4, max_steps=100,
        max_budget_per_hour=28_000_000,
    )  # fmt: skip
    for tree in ("step-100", "step-50", "step-50/universal"):
        inside = {
            name.removeprefix(tree + "/"): data
            for name, data in FILES.items()
            if name.startswith(tree + "/") and (tree.endswith("universal") or "/universal/" not in name)
        }
        step, _, sub = tree.partition("/")
        stored_checkpoint(job.pk, int(step.removeprefix("step-")), inside, tmp_path, sub=sub)
    return job


def listed(client: Client, job: Job) -> list[dict]:
    response = client.get(f"/api/v1/jobs/{job.pk}/artifacts/")
    assert response.status_code == 200
    return response.json()


def test_every_listed_artifact_url_downloads_its_file(alice, stored_finished_job):
    client = client_of(alice)
    artifacts = listed(client, stored_finished_job)
    assert sorted(a["path"] for a in artifacts) == sorted(FILES)

    for artifact in artifacts:
        response = client.get(artifact["url"])  # the absolute URL as listed, followed as a client would

        assert downloaded(response) == FILES[artifact["path"]], artifact["url"]
        if response.status_code == 302:
            assert response["Cache-Control"] == "private, no-store"
        else:
            assert response["Content-Disposition"].startswith("attachment")


def test_the_final_model_and_its_config_are_listed_without_a_trailing_slash(alice, stored_finished_job):
    artifacts = {a["path"]: a for a in listed(client_of(alice), stored_finished_job)}

    final = f"http://testserver/api/v1/jobs/{stored_finished_job.pk}/artifacts/step-100/model/model.safetensors"
    assert artifacts["step-100/model/model.safetensors"]["url"] == final
    assert artifacts["step-100/model/config.json"]["url"].endswith("/step-100/model/config.json")
    assert artifacts["step-100/model/config.json"]["kind"] == "final model"
    assert artifacts["step-50/meta.json"]["kind"] == "checkpoint"
    assert artifacts["step-50/meta.json"]["size_bytes"] == len(FILES["step-50/meta.json"])


def test_another_user_following_the_listed_urls_gets_404s(alice, bob, stored_finished_job):
    urls = [a["url"] for a in listed(client_of(alice), stored_finished_job)]
    bobs = client_of(bob)

    assert [bobs.get(url).status_code for url in urls] == [404] * len(urls)


def test_without_a_token_the_listed_urls_are_401s(alice, stored_finished_job):
    urls = [a["url"] for a in listed(client_of(alice), stored_finished_job)]

    assert {Client().get(url).status_code for url in urls} == {401}


def test_a_missing_artifact_is_a_json_404(alice, stored_finished_job):
    response = client_of(alice).get(f"/api/v1/jobs/{stored_finished_job.pk}/artifacts/step-100/missing.json")

    assert response.status_code == 404 and response.json() == {"detail": "No such artifact."}


def test_a_checkpoint_still_being_saved_is_neither_listed_nor_served(alice, stored_finished_job, tmp_path):
    (tmp_path / "half" / "ds").mkdir(parents=True)
    (tmp_path / "half" / "ds" / "shard.pt").write_bytes(b"half a checkpoint")
    upload_files(
        platform_store(), f"checkpoints/job-{stored_finished_job.pk}/step-150", tmp_path / "half", ["ds/shard.pt"]
    )
    client = client_of(alice)

    assert not [a for a in listed(client, stored_finished_job) if a["path"].startswith("step-150/")]
    assert client.get(f"/api/v1/jobs/{stored_finished_job.pk}/artifacts/step-150/ds/shard.pt").status_code == 404


@pytest.mark.parametrize("path", ["step-100/manifest.json", "step-100/../step-50/meta.json", "step-100//x", "x"])
def test_bookkeeping_and_odd_paths_are_not_artifacts(alice, stored_finished_job, path):
    response = client_of(alice).get(f"/api/v1/jobs/{stored_finished_job.pk}/artifacts/{path}")

    assert response.status_code == 404


def test_a_path_longer_than_any_stored_name_is_a_404(alice, stored_finished_job):
    response = client_of(alice).get(f"/api/v1/jobs/{stored_finished_job.pk}/artifacts/step-100/{'x' * 300}")

    assert response.status_code == 404

"""Checkpoints as objects (#31): `GET /api/v1/jobs/{id}/checkpoints/` lists each with its step, losses, time,
size and why it is kept, beside the retention policy; `.../{step}/download/` sends it as a Hugging Face model
(a LoRA job's adapter) like the final model; `DELETE .../{step}/` removes its tree and row, but never the
checkpoint a job that has not ended resumes from. Another user's job is a 404; a bad step a 400 or 404 naming it.
"""

from __future__ import annotations

import io
import tarfile
from datetime import timedelta

import pytest
from django.utils import timezone

from fleet.choices import JobStatus, TrainingMode
from fleet.models import Job
from tests.support.stored import keys, own_store_url, stored_checkpoint
from workers.models import JobCheckpoint

pytestmark = pytest.mark.django_db

WEIGHTS = b"\x01\x02" * 4096
MODEL = {"meta.json": b"{}", "model/config.json": b'{"model_type": "llama"}', "model/model.safetensors": WEIGHTS}
ADAPTER = {"meta.json": b"{}", "adapter/adapter_config.json": b"{}", "adapter/adapter_model.safetensors": WEIGHTS}


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)
    settings.CHECKPOINT_KEEP = 1


def checkpoints_of(job: Job, tmp_path, steps: dict[int, dict], latest: int | None = None) -> None:
    """Store each step's tree and record it as a reported checkpoint (losses 3.0, 2.0, ... by step order)."""
    now = timezone.now()
    for index, (step, files) in enumerate(sorted(steps.items())):
        path = stored_checkpoint(job.pk, step, files, tmp_path)
        JobCheckpoint.objects.create(
            job=job, epoch=1, step=step, key=path.removeprefix("store:"), loss=3.0 - index,
            eval_loss=(3.5 - index) if step % 20 == 0 else None, bytes=len(WEIGHTS) + 40,
            created_at=now - timedelta(minutes=10 - index),
        )  # fmt: skip
        if step == (latest or max(steps)):
            job.latest_checkpoint, job.latest_checkpoint_step = path, step
    job.save(update_fields=["latest_checkpoint", "latest_checkpoint_step"])


@pytest.fixture
def finished(alice, tmp_path) -> Job:
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=40, max_budget_per_hour=28_000_000,
        status=JobStatus.SUCCEEDED, step=40,
    )  # fmt: skip
    checkpoints_of(job, tmp_path, {10: MODEL, 20: MODEL, 30: MODEL, 40: MODEL})
    return job


def url(job: Job, step=None, download: bool = False) -> str:
    base = f"/api/v1/jobs/{job.pk}/checkpoints/"
    return base if step is None else f"{base}{step}/" + ("download/" if download else "")


def tar_of(response) -> dict[str, bytes]:
    assert response.status_code == 200, response.content
    with tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content))) as archive:
        return {name: archive.extractfile(name).read() for name in archive.getnames()}


def test_the_list_has_each_checkpoints_losses_time_size_and_the_retention_policy(finished, api_for, alice):
    answer = api_for(alice).get(url(finished))

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["retention"]["keep_periodic"] == 1 and body["retention"]["prune_every_s"] > 0
    assert "1 newest periodic" in body["retention"]["policy"]
    rows = body["checkpoints"]
    assert [row["step"] for row in rows] == [40, 30, 20, 10]
    assert [row["loss"] for row in rows] == [0.0, 1.0, 2.0, 3.0]
    assert [row["eval_loss"] for row in rows] == [0.5, None, 2.5, None]
    assert all(row["size_bytes"] == len(WEIGHTS) + 40 and row["created_at"] for row in rows)
    # The final one is kept for good; with CHECKPOINT_KEEP=1 the older periodic ones go at the next pass.
    assert [row["kept"] for row in rows] == ["final", "prunable", "prunable", "prunable"]
    assert rows[0]["download_url"].endswith(url(finished, 40, download=True))
    assert all(row["deletable"] for row in rows)  # the job has ended


def test_another_users_job_is_a_404_for_list_download_and_delete(finished, api_for, bob):
    client = api_for(bob)

    assert client.get(url(finished)).status_code == 404
    assert client.get(url(finished, 20, download=True)).status_code == 404
    assert client.delete(url(finished, 20)).status_code == 404
    assert JobCheckpoint.objects.filter(job=finished, step=20).exists()


def test_an_intermediate_checkpoint_downloads_as_a_model_with_its_own_card(finished, api_for, alice):
    files = tar_of(api_for(alice).get(url(finished, 20, download=True)))

    folder = f"job-{finished.pk}-step-20-model"
    assert sorted(files) == [f"{folder}/{name}" for name in ("README.md", "config.json", "model.safetensors")]
    assert files[f"{folder}/model.safetensors"] == WEIGHTS
    card = files[f"{folder}/README.md"].decode()
    assert "Steps: 20 of 40 (step-20)" in card and "2.0000; held-out 2.5000 (at this checkpoint)" in card
    assert f'from_pretrained("./{folder}")' in card


def test_a_lora_jobs_checkpoint_downloads_as_its_adapter(alice, api_for, tmp_path):
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=40, max_budget_per_hour=28_000_000,
        status=JobStatus.RUNNING, mode=TrainingMode.LORA, lora={"r": 4, "alpha": 8},
    )  # fmt: skip
    checkpoints_of(job, tmp_path, {10: ADAPTER, 20: ADAPTER})
    client = api_for(alice)

    files = tar_of(client.get(url(job, 10, download=True)))
    merged = client.get(url(job, 10, download=True), {"merged": "true"})

    folder = f"job-{job.pk}-step-10-adapter"
    assert sorted(files) == [
        f"{folder}/{name}" for name in ("README.md", "adapter_config.json", "adapter_model.safetensors")
    ]
    assert merged.status_code == 409 and merged.json()["code"] == "checkpoint_not_exported"
    assert "merged weights are exported only with the final and stop checkpoints" in merged.json()["detail"]


def test_a_checkpoint_saved_without_its_model_is_refused_by_name(alice, api_for, tmp_path):
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=40, max_budget_per_hour=28_000_000,
        status=JobStatus.SUCCEEDED,
    )  # fmt: skip
    checkpoints_of(job, tmp_path, {10: {"meta.json": b"{}"}})

    answer = api_for(alice).get(url(job, 10, download=True))

    assert answer.status_code == 409 and answer.json()["code"] == "checkpoint_not_exported"
    assert "step 10 has no model/ folder" in answer.json()["detail"]


def test_deleting_a_checkpoint_removes_its_tree_and_row(finished, api_for, alice):
    assert keys(f"checkpoints/job-{finished.pk}/step-20")

    answer = api_for(alice).delete(url(finished, 20))

    assert answer.status_code == 204, answer.content
    assert keys(f"checkpoints/job-{finished.pk}/step-20") == []
    assert not JobCheckpoint.objects.filter(job=finished, step=20).exists()
    assert keys(f"checkpoints/job-{finished.pk}/step-30")  # the others stay
    assert [row["step"] for row in api_for(alice).get(url(finished)).json()["checkpoints"]] == [40, 30, 10]


def test_the_checkpoint_a_running_job_resumes_from_is_refused_with_a_409(alice, api_for, tmp_path):
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=100, max_budget_per_hour=28_000_000,
        status=JobStatus.RUNNING, step=35,
    )  # fmt: skip
    checkpoints_of(job, tmp_path, {10: MODEL, 20: MODEL, 30: MODEL})
    client = api_for(alice)

    refused = client.delete(url(job, 30))
    listed = {row["step"]: row for row in client.get(url(job)).json()["checkpoints"]}
    older = client.delete(url(job, 10))

    assert refused.status_code == 409 and refused.json()["code"] == "checkpoint_in_use"
    assert "latest checkpoint" in refused.json()["detail"] and "resumes from it" in refused.json()["detail"]
    assert keys(f"checkpoints/job-{job.pk}/step-30") and JobCheckpoint.objects.filter(job=job, step=30).exists()
    assert (listed[30]["deletable"], listed[30]["kept"], listed[20]["deletable"]) == (False, "latest", True)
    assert older.status_code == 204


def test_the_checkpoint_a_waiting_continuation_starts_from_is_refused_with_a_409(finished, api_for, alice):
    key = JobCheckpoint.objects.get(job=finished, step=30).key
    later = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=80, max_budget_per_hour=28_000_000,
        status=JobStatus.QUEUED, continued_from=finished, start_checkpoint=key, step=30,
    )  # fmt: skip

    refused = api_for(alice).delete(url(finished, 30))

    assert refused.status_code == 409 and refused.json()["code"] == "checkpoint_in_use"
    assert f"Job {later.pk} continues from step 30 of job {finished.pk}" in refused.json()["detail"]
    assert keys(f"checkpoints/job-{finished.pk}/step-30")


def test_the_final_checkpoint_of_an_ended_job_can_be_deleted(finished, api_for, alice):
    assert api_for(alice).delete(url(finished, 40)).status_code == 204
    assert keys(f"checkpoints/job-{finished.pk}/step-40") == []


@pytest.mark.parametrize("step", ["abc", "-1", "1.5", "１２"])
def test_a_step_that_is_not_a_whole_number_is_a_400_naming_it(finished, api_for, alice, step):
    for answer in (api_for(alice).get(url(finished, step, download=True)), api_for(alice).delete(url(finished, step))):
        assert answer.status_code == 400, answer.content
        assert "whole number" in answer.json()["errors"]["step"][0]


def test_an_unknown_step_is_a_404_naming_the_steps_there_are(finished, api_for, alice):
    for answer in (api_for(alice).get(url(finished, 25, download=True)), api_for(alice).delete(url(finished, 25))):
        assert answer.status_code == 404, answer.content
        assert answer.json()["code"] == "checkpoint_not_found"
        assert "no checkpoint at step 25 (its checkpoints: 10, 20, 30, 40)" in answer.json()["detail"]
    assert api_for(alice).get("/api/v1/jobs/abc/checkpoints/").status_code == 404

"""The job page's checkpoint table (#31): each checkpoint's step, losses, size and why it is kept, under the
retention policy, with its model download and a delete button (none for what a running job resumes from)."""

from __future__ import annotations

import io
import tarfile

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.choices import JobStatus
from fleet.models import Job
from tests.support.stored import keys, own_store_url, stored_checkpoint
from workers.models import JobCheckpoint

pytestmark = pytest.mark.django_db

MODEL = {"meta.json": b"{}", "model/config.json": b"{}", "model/model.safetensors": b"w" * 2048}


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)
    settings.CHECKPOINT_KEEP = 2


@pytest.fixture
def running(alice, tmp_path) -> Job:
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=100, max_budget_per_hour=28_000_000,
        status=JobStatus.RUNNING, step=25,
    )  # fmt: skip
    for step, loss, eval_loss in ((10, 2.25, 2.5), (20, 1.125, None)):
        path = stored_checkpoint(job.pk, step, MODEL, tmp_path)
        JobCheckpoint.objects.create(
            job=job, epoch=1, step=step, key=path.removeprefix("store:"), loss=loss, eval_loss=eval_loss,
            bytes=4096, created_at=timezone.now(),
        )  # fmt: skip
        job.latest_checkpoint, job.latest_checkpoint_step = path, step
    job.save()
    return job


def test_the_page_lists_each_checkpoint_with_its_losses_and_the_retention_policy(client, alice, running):
    client.force_login(alice)

    html = client.get(reverse("job", args=[running.pk])).content.decode()

    table = html[html.index('data-testid="checkpoint-table"') :]
    assert "keeps its 2 newest periodic checkpoints" in table
    assert table.index('data-step="20"') < table.index('data-step="10"')  # newest first
    assert "2.2500" in table and "2.5000" in table and "1.1250" in table
    assert "4.0\xa0KB" in table
    assert "kept: the latest, which the job resumes from" in table
    assert table.count('data-testid="checkpoint-delete"') == 1  # not step 20: the running job resumes from it
    assert reverse("job_checkpoint_model", args=[running.pk, 10]) in table


def test_a_checkpoint_downloads_and_deletes_from_the_page(client, alice, bob, running):
    client.force_login(bob)
    assert client.get(reverse("job_checkpoint_model", args=[running.pk, 10])).status_code == 404
    assert client.post(reverse("job_checkpoint_delete", args=[running.pk, 10])).status_code == 404
    client.force_login(alice)

    download = client.get(reverse("job_checkpoint_model", args=[running.pk, 10]))
    with tarfile.open(fileobj=io.BytesIO(b"".join(download.streaming_content))) as archive:
        names = archive.getnames()
    deleted = client.post(reverse("job_checkpoint_delete", args=[running.pk, 10]), follow=True)
    refused = client.post(reverse("job_checkpoint_delete", args=[running.pk, 20]), follow=True)

    assert f"job-{running.pk}-step-10-model/model.safetensors" in names
    assert "Checkpoint at step 10" in deleted.content.decode() and keys(f"checkpoints/job-{running.pk}/step-10") == []
    assert "resumes from it" in refused.content.decode()
    assert JobCheckpoint.objects.filter(job=running, step=20).exists()

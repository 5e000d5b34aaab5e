"""The model tar is streamed from object storage object by object, sized by the checkpoint's manifest;
a stored file that isn't what its manifest says ends the stream instead of sending a wrong file."""

from __future__ import annotations

import io
import tarfile

import pytest

from fleet.choices import JobStatus
from fleet.models import Job
from kernel.storage import StorageError
from tests.support.stored import own_store_url, stored_checkpoint
from workers.services.model_download import ModelNotReady, model_download
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

WEIGHTS = bytes(range(256)) * 5000  # over one chunk


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


@pytest.fixture
def finished(alice, tmp_path) -> Job:
    job = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000,
        status=JobStatus.SUCCEEDED, step=10,
    )  # fmt: skip
    files = {"meta.json": b"{}", "model/config.json": b"{}", "model/model.safetensors": WEIGHTS}
    job.latest_checkpoint = stored_checkpoint(job.pk, 10, files, tmp_path)
    job.save(update_fields=["latest_checkpoint"])
    return job


def test_the_tar_holds_the_stored_model_folder_and_a_model_card(finished):
    download = model_download(finished)

    with tarfile.open(fileobj=io.BytesIO(b"".join(download.stream()))) as archive:
        names = sorted(archive.getnames())
        weights = archive.extractfile(f"job-{finished.pk}-model/model.safetensors").read()

    assert names == [f"job-{finished.pk}-model/{name}" for name in ("README.md", "config.json", "model.safetensors")]
    assert weights == WEIGHTS


def test_a_stored_file_of_another_size_ends_the_stream(finished):
    download = model_download(finished)
    platform_store().put_bytes(f"checkpoints/job-{finished.pk}/step-10/model/model.safetensors", WEIGHTS[:-1])

    with pytest.raises(StorageError, match="model.safetensors is not the 1280000 bytes its manifest says"):
        b"".join(download.stream())


def test_a_checkpoint_of_another_job_is_never_downloaded(finished, alice, tmp_path):
    other = Job.objects.create(
        owner=alice, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000,
        status=JobStatus.SUCCEEDED, latest_checkpoint=finished.latest_checkpoint,
    )  # fmt: skip

    with pytest.raises(ModelNotReady):
        model_download(other)

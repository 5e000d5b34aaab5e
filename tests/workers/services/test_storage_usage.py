"""`manage.py storage_usage`: what each user and each job keeps in object storage, from the store's listing."""

from __future__ import annotations

import contextlib
import io
import threading

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from fleet.models import Dataset, Job
from kernel.storage import StorageError
from tests.support.accounts import token_client
from tests.support.stored import keys, own_store_url, stored_checkpoint
from workers.models import JobCheckpoint
from workers.services import storage_quota
from workers.services.datasets import DatasetRejected, store_dataset
from workers.services.storage import platform_store
from workers.services.storage_usage import storage_usage

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)


def job_of(owner) -> Job:
    return Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000
    )


def manifest_size(prefix: str) -> int:
    """The bytes of the manifests under `prefix` (they count too)."""
    return sum(item.size for item in platform_store().list(prefix) if item.key.endswith("/manifest.json"))


def test_bytes_are_counted_per_user_per_kind_and_per_job(alice, bob, tmp_path):
    dataset = store_dataset(alice, SimpleUploadedFile("a.txt", b"x" * 100), name="a")
    job = job_of(bob)
    stored_checkpoint(job.pk, 5, {"meta.json": b"m" * 1000}, tmp_path)
    stored_checkpoint(job.pk, 5, {"zero/w.pt": b"u" * 50}, tmp_path, sub="universal")
    platform_store().put_bytes(f"checkpoints/job-{job.pk}/step-9/ds/shard.pt", b"c" * 7)  # a crashed save
    platform_store().put_bytes("datasets/999/orphan/data.txt", b"o" * 3)
    platform_store().put_bytes("hub/org--name/abc/config.json", b"h" * 11)

    usage = storage_usage(platform_store())

    dataset_bytes = 100 + manifest_size(dataset.store_prefix)
    checkpoint_bytes = 1000 + 50 + 7 + manifest_size(f"checkpoints/job-{job.pk}")
    assert usage.users[alice.pk] == {"datasets": dataset_bytes, "models": 0, "checkpoints": 0}
    assert usage.users[bob.pk] == {"datasets": 0, "models": 0, "checkpoints": checkpoint_bytes}
    assert usage.jobs == {job.pk: checkpoint_bytes}
    assert usage.unowned == {"unreferenced datasets": 3, "hub": 11}
    assert usage.total == dataset_bytes + checkpoint_bytes + 3 + 11


def test_the_command_prints_a_line_per_user_and_per_job(alice, tmp_path):
    job = job_of(alice)
    stored_checkpoint(job.pk, 5, {"meta.json": b"m" * 1234}, tmp_path)
    out = io.StringIO()

    call_command("storage_usage", stdout=out)

    text = out.getvalue()
    total = sum(item.size for item in platform_store().list(f"checkpoints/job-{job.pk}"))
    assert text.startswith(f"Object storage: {platform_store().describe()} (2 objects, {total:,} bytes)")
    (user_line,) = [line for line in text.splitlines() if line.startswith(f"alice (id {alice.pk})")]
    assert user_line.split()[-4:] == ["0", "0", f"{total:,}", f"{total:,}"]
    assert f"job {job.pk}" in text and f"{total:,}" in text.split(f"job {job.pk}")[1].splitlines()[0]


def test_a_store_that_cannot_be_read_is_a_clear_command_error(monkeypatch):
    def unreachable(store):
        raise StorageError("listing '' in s3://starverse/x failed: connection refused")

    monkeypatch.setattr("workers.management.commands.storage_usage.storage_usage", unreachable)

    with pytest.raises(CommandError, match="Can't read object storage: listing '' in s3://starverse/x failed"):
        call_command("storage_usage", stdout=io.StringIO())


# -- the quota -------------------------------------------------------------------------------------


def test_an_upload_past_the_quota_is_refused_naming_the_quota_and_what_is_used(alice, bob, settings):
    settings.STORAGE_QUOTA_BYTES = 150
    store_dataset(alice, SimpleUploadedFile("a.txt", b"x" * 100), name="a")
    store_dataset(bob, SimpleUploadedFile("b.txt", b"y" * 100), name="b")  # each user has their own quota

    response = token_client(alice).post(
        "/api/v1/datasets/", {"file": SimpleUploadedFile("c.txt", b"z" * 100)}, format="multipart"
    )

    assert response.status_code == 400
    assert response.json()["errors"]["file"] == [
        "This dataset takes 100 bytes, but your storage quota is 150 bytes and your datasets and models already "
        "use 100 bytes (datasets 100 bytes, models 0 bytes). Delete ones you no longer need, or ask the operator "
        "for a larger quota."
    ]
    assert Dataset.objects.filter(owner=alice).count() == 1
    assert len(keys(f"datasets/{alice.pk}")) == 2  # the first dataset's file and manifest, nothing more


@pytest.mark.django_db(transaction=True)
def test_two_uploads_at_once_cannot_pass_the_quota_together(alice, settings, monkeypatch):
    """Each sees room for itself; the check and the row are one step under the owner's lock, so one is refused."""
    settings.STORAGE_QUOTA_BYTES = 150
    checked = threading.Barrier(2, timeout=2)
    check = storage_quota.check_room

    def slow_check(owner, adding, what):
        check(owner, adding, what)
        with contextlib.suppress(threading.BrokenBarrierError):  # with the lock, the other one waits for this
            checked.wait()

    monkeypatch.setattr(storage_quota, "check_room", slow_check)
    outcomes: list[str] = []

    def upload(name: str) -> None:
        try:
            store_dataset(alice, SimpleUploadedFile(f"{name}.txt", b"x" * 100), name=name)
            outcomes.append("stored")
        except DatasetRejected as refused:
            outcomes.append(str(refused)[:40])
        finally:
            connection.close()

    threads = [threading.Thread(target=upload, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["This dataset takes 100 bytes, but your s", "stored"]
    assert Dataset.objects.filter(owner=alice).count() == 1
    assert len(keys(f"datasets/{alice.pk}")) == 2


def test_the_dashboard_shows_what_counts_against_the_quota(client, alice, settings, tmp_path):
    settings.STORAGE_QUOTA_BYTES = 10 * 1024 * 1024
    store_dataset(alice, SimpleUploadedFile("a.txt", b"x" * 2 * 1024 * 1024), name="a")
    job = job_of(alice)
    JobCheckpoint.objects.create(job=job, epoch=1, step=5, key="k", bytes=3 * 1024 * 1024, created_at=job.created_at)
    client.force_login(alice)

    html = client.get(reverse("dashboard")).content.decode()

    assert 'data-testid="storage-used">2.0\xa0MB of 10.0\xa0MB</strong>' in html
    assert 'value="20"' in html
    assert "Datasets 2.0\xa0MB · models 0\xa0bytes." in html
    assert "checkpoints (3.0\xa0MB) are not counted" in html

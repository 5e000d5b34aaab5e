"""Uploaded datasets live in object storage: a tree of one file (datasets/<owner>/<uuid>/data.<txt|jsonl>)
kept only once the upload is checked, read back through the web's cache for previews, deleted with the
dataset; a store that fails is a 503, never a 500 or a half-kept upload."""

from __future__ import annotations

import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import MemoryFileUploadHandler, TemporaryFileUploadHandler
from django.urls import reverse

from fleet.choices import JobStatus
from fleet.models import Dataset, Job
from kernel.storage.trees import read_manifest
from tests.support.accounts import token_client
from tests.support.stored import keys, own_store_url
from workers.services.storage import platform_store

pytestmark = pytest.mark.django_db

TEXT = b"roses are red\nviolets are blue\n"
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def own_store(settings, tmp_path):
    settings.STORAGE_URL = own_store_url(tmp_path)
    settings.STAGING_CACHE_DIR = tmp_path / "web-cache"


def upload(user, name: str, content: bytes):
    return token_client(user).post("/api/v1/datasets/", {"file": SimpleUploadedFile(name, content)}, format="multipart")


def job_using(owner, **fields) -> Job:
    return Job.objects.create(
        owner=owner, model_name="llama-tiny", per_device_batch_size=4, max_steps=10, max_budget_per_hour=28_000_000,
        status=JobStatus.SUCCEEDED, **fields,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "content", "stored_as", "kind"),
    [
        ("poems.txt", TEXT, "data.txt", "text"),
        ("notes", TEXT, "data.txt", "text"),
        ("chat.json", b'{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n',
         "data.jsonl", "chat"),
        ("lines.txt", b'{"text": "a json line read as text, as its name says"}\n', "data.txt", "text"),
    ],
)  # fmt: skip
def test_an_upload_is_stored_as_a_tree_of_one_file_whose_name_keeps_its_kind(alice, name, content, stored_as, kind):
    response = upload(alice, name, content)

    assert response.status_code == 201, response.json()
    dataset = Dataset.objects.get(pk=response.json()["id"])
    assert dataset.kind == kind and dataset.file_name == stored_as
    assert dataset.store_prefix.startswith(f"datasets/{alice.pk}/") and dataset.location == f"store:{dataset.key}"
    manifest = read_manifest(platform_store(), dataset.store_prefix)
    assert list(manifest.files) == [stored_as] and manifest.meta == {"kind": kind}
    assert dataset.sha256 == manifest.files[stored_as].sha256 == hashlib.sha256(content).hexdigest()
    assert dataset.size_bytes == len(content)
    assert platform_store().get_bytes(dataset.key) == content


def test_a_refused_upload_stores_nothing(alice):
    assert upload(alice, "blob.txt", b"\x00\x01binary").status_code == 400
    assert keys("datasets") == [] and not Dataset.objects.exists()


@pytest.fixture
def streamed(monkeypatch) -> list[int]:
    """The sizes of the chunks Django's own upload handlers (memory, temporary file) were given."""
    sizes: list[int] = []
    for handler in (MemoryFileUploadHandler, TemporaryFileUploadHandler):
        keep = handler.receive_data_chunk

        def counted(self, raw_data, start, keep=keep):
            sizes.append(len(raw_data))
            return keep(self, raw_data, start)

        monkeypatch.setattr(handler, "receive_data_chunk", counted)
    return sizes


@pytest.mark.parametrize("over", [3 * MIB, MIB // 2], ids=["declared length far over", "within the form's allowance"])
def test_a_dataset_over_the_limit_is_a_413_refused_while_it_streams_in(alice, settings, streamed, over):
    settings.DATASET_MAX_BYTES = MIB

    response = upload(alice, "big.txt", b"line of text\n" * ((MIB + over) // 13))

    assert response.status_code == 413
    assert response.json()["detail"].endswith(f"a dataset may be at most {MIB:,} bytes (1.0 MiB).")
    assert sum(streamed) <= MIB  # the rest of the body was never kept
    assert keys("datasets") == [] and not Dataset.objects.exists()


def test_the_datasets_page_refuses_a_file_over_the_limit_with_a_413_naming_it(client, alice, settings, streamed):
    settings.DATASET_MAX_BYTES = MIB
    client.force_login(alice)

    response = client.post(reverse("datasets"), {"file": SimpleUploadedFile("big.txt", b"x\n" * MIB), "name": ""})

    assert response.status_code == 413
    assert f"a dataset may be at most {MIB:,} bytes" in response.content.decode()
    assert sum(streamed) <= MIB and not Dataset.objects.exists()


def test_a_store_that_fails_is_a_503_and_nothing_is_kept(alice, settings, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    settings.STORAGE_URL = f"file://{tmp_path / 'a-file' / 'store'}"

    response = upload(alice, "poems.txt", TEXT)

    assert response.status_code == 503
    assert response.json()["detail"].startswith("The dataset could not be stored right now")
    assert not Dataset.objects.exists()


def test_deleting_a_dataset_deletes_its_tree(alice, django_capture_on_commit_callbacks):
    dataset_id = upload(alice, "poems.txt", TEXT).json()["id"]
    prefix = Dataset.objects.get(pk=dataset_id).store_prefix

    with django_capture_on_commit_callbacks(execute=True):
        assert token_client(alice).delete(f"/api/v1/datasets/{dataset_id}/").status_code == 204

    assert keys(prefix) == [] and not Dataset.objects.exists()


@pytest.mark.parametrize("use", ["dataset_upload", "eval_dataset_upload"])
def test_a_dataset_a_job_trains_or_evaluates_on_cannot_be_deleted(alice, use):
    dataset_id = upload(alice, "poems.txt", TEXT).json()["id"]
    job_using(alice, **{use: Dataset.objects.get(pk=dataset_id)})

    response = token_client(alice).delete(f"/api/v1/datasets/{dataset_id}/")

    assert response.status_code == 400
    assert response.json()["errors"]["dataset"] == ["This dataset is used by a job and cannot be deleted."]
    assert Dataset.objects.filter(pk=dataset_id).exists()
    assert keys(Dataset.objects.get(pk=dataset_id).store_prefix)


def test_a_preview_reads_the_stored_file_through_the_webs_cache(client, alice, settings):
    dataset = Dataset.objects.get(pk=upload(alice, "poems.txt", TEXT).json()["id"])
    client.force_login(alice)

    html = client.get(reverse("datasets"), {"preview": dataset.pk}).content.decode()

    assert html.count('data-testid="preview-record"') == 2  # both lines, byte by byte
    objects = settings.STAGING_CACHE_DIR / "objects"
    assert [path.name for path in objects.iterdir()] == [dataset.sha256]
    assert [path.name for path in settings.STAGING_CACHE_DIR.iterdir()] == ["objects"]  # the staging folder is gone


def test_a_preview_of_a_dataset_whose_file_is_gone_says_so(client, alice):
    dataset = Dataset.objects.get(pk=upload(alice, "poems.txt", TEXT).json()["id"])
    platform_store().delete_prefix(dataset.store_prefix)
    client.force_login(alice)

    response = client.get(reverse("datasets"), {"preview": dataset.pk})

    assert response.status_code == 400
    assert "Can&#x27;t read the dataset&#x27;s file: nothing stored at" in response.content.decode()

"""Migration 0015 moves what the platform kept under MEDIA_ROOT into object storage: each dataset file
becomes the tree datasets/<owner>/<uuid>/data.<txt|jsonl>, each uploaded model folder the tree of its
old path (models/<owner>/<uuid>); a row whose file is gone stays, and reads of it say nothing is stored."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from fleet.models import Dataset, UploadedModel
from kernel.storage.trees import read_manifest
from tests.support.stored import own_store_url
from workers.services.storage import platform_store

BEFORE = ("workers", "0014_node_address_observed")


def migrate(target: list[tuple[str, str]]):
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    return MigrationExecutor(connection).loader.project_state(target).apps


@pytest.mark.django_db(transaction=True)
def test_old_media_files_are_moved_into_storage(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.STORAGE_URL = own_store_url(tmp_path)
    # Every app's newest: going back to BEFORE takes back what depends on it in other apps too (fleet's).
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    old = migrate([BEFORE])
    try:
        user = old.get_model("auth", "User").objects.create(username="carol", email="carol@example.com")
        (settings.MEDIA_ROOT / "datasets" / "2026" / "11").mkdir(parents=True)
        (settings.MEDIA_ROOT / "datasets" / "2026" / "11" / "poems.txt").write_bytes(b"roses\nviolets\n")
        old_datasets = old.get_model("workers", "Dataset")
        kept = old_datasets.objects.create(
            owner_id=user.pk, name="poems", kind="text", file="datasets/2026/11/poems.txt", size_bytes=14, samples=2
        )
        lost = old_datasets.objects.create(
            owner_id=user.pk, name="lost", kind="chat", file="datasets/2026/11/gone.jsonl", size_bytes=1, samples=1
        )
        folder = settings.MEDIA_ROOT / "models" / str(user.pk) / "abc123"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"model_type": "llama"}')
        old.get_model("workers", "UploadedModel").objects.create(
            owner_id=user.pk, name="m", architecture="llama", parameters=1, size_bytes=1, config={}, shape={},
            directory=f"models/{user.pk}/abc123",
        )  # fmt: skip
    finally:
        migrate(latest)

    poems, gone = Dataset.objects.get(pk=kept.pk), Dataset.objects.get(pk=lost.pk)
    assert poems.store_prefix.startswith(f"datasets/{user.pk}/") and poems.file_name == "data.txt"
    assert platform_store().get_bytes(poems.key) == b"roses\nviolets\n"
    assert poems.sha256 == read_manifest(platform_store(), poems.store_prefix).files["data.txt"].sha256
    assert gone.file_name == "data.jsonl" and gone.sha256 == ""
    assert read_manifest(platform_store(), gone.store_prefix) is None
    model = UploadedModel.objects.get(owner_id=user.pk)
    assert model.store_prefix == f"models/{user.pk}/abc123"
    assert set(read_manifest(platform_store(), model.store_prefix).files) == {"config.json"}

"""The staging cache: stored trees copied to a host once, by content, verified, capped, and linked into runs."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from kernel.storage import StorageError
from kernel.storage.cache import StagingCache
from kernel.storage.trees import upload_files, upload_tree
from tests.support.folders import write_folder

A = {"config.json": b'{"a": 1}', "weights.bin": b"A" * 4000}
B = {"config.json": b'{"b": 2}', "weights.bin": b"B" * 4000}


class Counting:
    """A store that counts its downloads."""

    def __init__(self, store):
        self.store, self.downloads = store, []

    def __getattr__(self, name):
        return getattr(self.store, name)

    def get_file(self, key, dest):
        self.downloads.append(key)
        return self.store.get_file(key, dest)


def stored_tree(store, tmp_path, prefix: str, files: dict[str, bytes]) -> str:
    upload_tree(store, prefix, write_folder(tmp_path / "src" / prefix, files))
    return prefix


def cached(cache: StagingCache) -> set[str]:
    return {path.name for path in cache.objects.iterdir()}


def test_a_staged_tree_is_its_files_linked_to_verified_objects(store, tmp_path):
    stored_tree(store, tmp_path, "models/7/a", A)
    cache = StagingCache(tmp_path / "cache")

    manifest = cache.stage_tree(store, "models/7/a", tmp_path / "run" / "model")

    for name, data in A.items():
        staged = tmp_path / "run" / "model" / name
        assert staged.read_bytes() == data
        assert os.path.samefile(staged, cache.object_path(manifest.files[name].sha256))  # a hard link, no copy
    assert cached(cache) == {entry.sha256 for entry in manifest.files.values()}
    assert oct(cache.object_path(manifest.files["config.json"].sha256).stat().st_mode & 0o777) == "0o400"


def test_a_selection_stages_only_the_files_it_names(store, tmp_path):
    stored_tree(store, tmp_path, "datasets/7/d", {"data.jsonl": b'{"text": "x"}\n'})
    cache = StagingCache(tmp_path / "cache")

    cache.stage_tree(store, "datasets/7/d", tmp_path / "run", select=lambda name: name == "data.jsonl")
    stored_tree(store, tmp_path, "models/7/a", A)
    cache.stage_tree(store, "models/7/a", tmp_path / "tok", select=lambda name: name.endswith(".json"))

    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["config.json"]
    assert (tmp_path / "run" / "data.jsonl").read_bytes() == b'{"text": "x"}\n'


def test_content_already_cached_is_not_downloaded_again_whatever_its_key(store, tmp_path):
    stored_tree(store, tmp_path, "models/7/a", A)
    stored_tree(store, tmp_path, "models/8/copy-of-a", A)
    counting = Counting(store)
    cache = StagingCache(tmp_path / "cache")

    cache.stage_tree(counting, "models/7/a", tmp_path / "run1")
    cache.stage_tree(counting, "models/7/a", tmp_path / "run2")
    cache.stage_tree(counting, "models/8/copy-of-a", tmp_path / "run3")

    assert sorted(counting.downloads) == ["models/7/a/config.json", "models/7/a/weights.bin"]
    assert (tmp_path / "run3" / "weights.bin").read_bytes() == A["weights.bin"]


def test_a_tree_without_its_manifest_cannot_be_staged(store, tmp_path):
    upload_files(store, "checkpoints/job-1/step-4", write_folder(tmp_path / "f", A), list(A))
    cache = StagingCache(tmp_path / "cache")

    with pytest.raises(StorageError, match="nothing stored at 'checkpoints/job-1/step-4'.*no manifest"):
        cache.stage_tree(store, "checkpoints/job-1/step-4", tmp_path / "run")
    assert not (tmp_path / "run").exists() and cached(cache) == set()


def test_an_object_that_does_not_match_its_manifest_is_refused_and_nothing_is_kept(store, tmp_path):
    stored_tree(store, tmp_path, "models/7/a", A)
    store.put_bytes("models/7/a/weights.bin", b"A" * 3999 + b"!")  # changed in storage: same size, other bytes
    cache = StagingCache(tmp_path / "cache")

    with pytest.raises(StorageError, match="models/7/a/weights.bin: downloaded 4000 bytes with SHA-256 .*corrupt"):
        cache.stage_tree(store, "models/7/a", tmp_path / "run")

    assert not (tmp_path / "run" / "weights.bin").exists()
    assert cached(cache) == {hashlib.sha256(A["config.json"]).hexdigest()}  # the good file only
    assert not any(path.name.startswith(".download-") for path in cache.objects.iterdir())


def test_a_truncated_object_is_refused_too(store, tmp_path):
    stored_tree(store, tmp_path, "models/7/a", A)
    store.put_bytes("models/7/a/weights.bin", b"A" * 10)
    cache = StagingCache(tmp_path / "cache")

    with pytest.raises(StorageError, match="downloaded 10 bytes"):
        cache.stage_tree(store, "models/7/a", tmp_path / "run")
    assert not any(path.name.startswith(".download-") for path in cache.objects.iterdir())


def test_a_missing_file_of_a_tree_fails_the_staging_naming_it(store, tmp_path):
    stored_tree(store, tmp_path, "models/7/a", A)
    store.delete("models/7/a/weights.bin")

    with pytest.raises(StorageError, match="no object 'models/7/a/weights.bin'"):
        StagingCache(tmp_path / "cache").stage_tree(store, "models/7/a", tmp_path / "run")


def test_over_its_cap_the_cache_evicts_the_least_recently_used_but_never_what_is_being_staged(store, tmp_path):
    stored_tree(store, tmp_path, "a", A)
    stored_tree(store, tmp_path, "b", B)
    cache = StagingCache(tmp_path / "cache", cap_bytes=5000)  # room for one tree, not two
    first = cache.stage_tree(store, "a", tmp_path / "run-a")
    past = time.time() - 60
    for entry in first.files.values():
        os.utime(cache.object_path(entry.sha256), (past, past))

    second = cache.stage_tree(store, "b", tmp_path / "run-b")

    assert cached(cache) == {entry.sha256 for entry in second.files.values()}
    assert cache.size() <= 5000


def test_a_staging_bigger_than_the_cap_keeps_all_it_needs(store, tmp_path):
    stored_tree(store, tmp_path, "a", A)
    cache = StagingCache(tmp_path / "cache", cap_bytes=100)

    manifest = cache.stage_tree(store, "a", tmp_path / "run")

    assert cached(cache) == {entry.sha256 for entry in manifest.files.values()}


def test_files_staged_for_a_run_survive_the_eviction_of_their_objects(store, tmp_path):
    stored_tree(store, tmp_path, "a", A)
    stored_tree(store, tmp_path, "b", B)
    cache = StagingCache(tmp_path / "cache", cap_bytes=5000)
    first = cache.stage_tree(store, "a", tmp_path / "run-a")
    past = time.time() - 60
    for entry in first.files.values():
        os.utime(cache.object_path(entry.sha256), (past, past))

    cache.stage_tree(store, "b", tmp_path / "run-b")

    assert not any(cache.object_path(entry.sha256).exists() for entry in first.files.values())
    assert {name: (tmp_path / "run-a" / name).read_bytes() for name in A} == A


def test_a_download_left_by_a_dead_process_is_cleared_after_an_hour(tmp_path):
    cache = StagingCache(tmp_path / "cache")
    old, fresh = cache.objects / ".download-old", cache.objects / ".download-fresh"
    old.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))

    cache.evict()

    assert not old.exists() and fresh.exists()

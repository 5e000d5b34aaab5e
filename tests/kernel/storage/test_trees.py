"""Trees: a folder under a prefix with manifest.json written last; no manifest, no tree."""

from __future__ import annotations

import hashlib
import json

import pytest

from kernel.storage import StorageError
from kernel.storage.trees import MANIFEST, delete_tree, read_manifest, upload_files, upload_tree, write_manifest
from tests.support.folders import write_folder

FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\x00" * 5000, "tok/vocab.txt": b"a\nb\n"}


class Recording:
    """A store that records the order of its writes and deletes."""

    def __init__(self, store):
        self.store, self.calls = store, []

    def __getattr__(self, name):
        method = getattr(self.store, name)
        if name not in ("put_file", "put_bytes", "delete", "delete_prefix"):
            return method

        def recorded(key, *args, **kwargs):
            self.calls.append((name, key))
            return method(key, *args, **kwargs)

        return recorded


def test_a_tree_lists_every_file_with_its_size_and_sha256(store, tmp_path):
    folder = write_folder(tmp_path / "model", FILES)

    written = upload_tree(store, "models/7/abc", folder, meta={"kind": "model"})
    manifest = read_manifest(store, "models/7/abc")

    assert manifest is not None and manifest.files == written.files and manifest.meta == {"kind": "model"}
    assert {name: (e.size, e.sha256) for name, e in manifest.files.items()} == {
        name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in FILES.items()
    }
    assert manifest.size == sum(len(data) for data in FILES.values())
    assert {o.key for o in store.list("models/7/abc")} == {f"models/7/abc/{n}" for n in [*FILES, MANIFEST]}
    assert store.get_bytes("models/7/abc/tok/vocab.txt") == b"a\nb\n"


def test_the_manifest_is_written_after_every_file(store, tmp_path):
    recording = Recording(store)

    upload_tree(recording, "t", write_folder(tmp_path / "f", FILES))

    assert recording.calls[-1] == ("put_bytes", f"t/{MANIFEST}")
    assert sorted(key for _, key in recording.calls[:-1]) == sorted(f"t/{name}" for name in FILES)


def test_files_without_their_manifest_are_no_tree(store, tmp_path):
    folder = write_folder(tmp_path / "f", FILES)
    upload_files(store, "checkpoints/job-1/step-4", folder, ["config.json"])  # a save that crashed here

    assert read_manifest(store, "checkpoints/job-1/step-4") is None
    assert read_manifest(store, "nothing/at/all") is None


def test_files_uploaded_by_several_hosts_become_one_tree_with_one_manifest(store, tmp_path):
    a = upload_files(store, "ck", write_folder(tmp_path / "a", {"rng-0.pt": b"0"}), ["rng-0.pt"])
    b = upload_files(store, "ck", write_folder(tmp_path / "b", {"rng-1.pt": b"1"}), ["rng-1.pt"])

    write_manifest(store, "ck", {**a, **b})

    assert set(read_manifest(store, "ck").files) == {"rng-0.pt", "rng-1.pt"}


def test_deleting_a_tree_removes_the_manifest_first_then_every_file(store, tmp_path):
    upload_tree(store, "t/one", write_folder(tmp_path / "f", FILES))
    store.put_bytes("t/one-beside", b"kept")
    recording = Recording(store)

    assert delete_tree(recording, "t/one") == len(FILES) + 1

    assert recording.calls[0] == ("delete", f"t/one/{MANIFEST}")
    assert read_manifest(store, "t/one") is None
    assert [o.key for o in store.list("t")] == ["t/one-beside"]


def test_deleting_a_tree_without_a_manifest_removes_its_files(store, tmp_path):
    upload_files(store, "t", write_folder(tmp_path / "f", FILES), list(FILES))

    assert delete_tree(store, "t") == len(FILES)
    assert list(store.list("t")) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "malformed tree manifest"),
        (b'{"format": "other/1", "files": {}}', "not a tree manifest"),
        (b"[1, 2]", "not a tree manifest"),
        (b'{"format": "starverse-tree/1"}', "malformed tree manifest"),
        (b'{"format": "starverse-tree/1", "files": {"a": {"size": "big", "sha256": "x"}}}', "malformed"),
    ],
)
def test_a_manifest_that_is_not_one_is_a_storage_error_naming_it(store, body, message):
    store.put_bytes(f"t/{MANIFEST}", body)

    with pytest.raises(StorageError, match=f"t/{MANIFEST} in .*{message}"):
        read_manifest(store, "t")


@pytest.mark.parametrize("name", ["../../outside", "/etc/passwd", "a/../../b", "a//b"])
def test_a_manifest_naming_a_file_outside_its_tree_is_refused(store, name):
    entry = {"size": 1, "sha256": "0" * 64}
    store.put_bytes(f"t/{MANIFEST}", json.dumps({"format": "starverse-tree/1", "files": {name: entry}}).encode())

    with pytest.raises(StorageError, match="invalid storage key"):
        read_manifest(store, "t")


def test_a_folder_holding_a_link_is_refused_before_anything_is_stored(store, tmp_path):
    folder = write_folder(tmp_path / "f", FILES)
    (folder / "secrets").symlink_to("/etc/passwd")

    with pytest.raises(StorageError, match="is a link"):
        upload_tree(store, "t", folder)
    assert list(store.list("t")) == []

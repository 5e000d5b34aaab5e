"""Trees: a folder of files stored under a prefix, with `manifest.json` written last.

The manifest lists every file's size and SHA-256. It is the tree's existence: a reader looks for it
first and trusts nothing under a prefix without it, so a crash mid-upload leaves no tree that anyone
(a resume, a download) could pick; and deleting starts with it. Files written by several hosts (a
checkpoint's shards) are uploaded by each with `upload_files`, and one of them writes the manifest
over all of them with `write_manifest` once every upload is done.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernel.storage.base import ObjectMissing, StorageError, Store, check_key, join

MANIFEST = "manifest.json"
FORMAT = "starverse-tree/1"


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclass
class Manifest:
    files: dict[str, FileEntry]
    created_at: float = field(default_factory=time.time)
    meta: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.files.values())

    def as_json(self) -> bytes:
        files = {name: {"size": e.size, "sha256": e.sha256} for name, e in sorted(self.files.items())}
        body = {"format": FORMAT, "created_at": self.created_at, "meta": self.meta, "files": files}
        return (json.dumps(body, indent=1) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Raises StorageError for anything but a well-formed manifest whose names stay inside the tree."""
        try:
            body = json.loads(data)
            if not isinstance(body, dict) or body.get("format") != FORMAT:
                found = body.get("format") if isinstance(body, dict) else type(body).__name__
                raise StorageError(f"not a tree manifest (format {found!r})")
            files = {check_key(name): FileEntry(int(e["size"]), str(e["sha256"])) for name, e in body["files"].items()}
            return cls(files, float(body.get("created_at", 0)), body.get("meta") or {})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StorageError(f"malformed tree manifest: {exc!r}") from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_files(folder: Path) -> list[str]:
    """Every regular file under `folder`, as '/'-paths relative to it (never a link, never the manifest)."""
    folder = Path(folder)
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise StorageError(f"{path} is a link; trees hold regular files only")
        if path.is_file() and path.relative_to(folder).as_posix() != MANIFEST:
            found.append(path.relative_to(folder).as_posix())
    return found


def upload_files(store: Store, prefix: str, folder: Path, names: Iterable[str]) -> dict[str, FileEntry]:
    """Upload folder/name to prefix/name for each name; returns their entries (no manifest)."""
    names = list(names)
    store.expect("PUT", [join(prefix, name) for name in names])
    entries = {}
    for name in names:
        path = Path(folder) / name
        entries[name] = FileEntry(path.stat().st_size, sha256_file(path))
        store.put_file(join(prefix, name), path)
    return entries


def write_manifest(store: Store, prefix: str, files: dict[str, FileEntry], meta: dict | None = None) -> Manifest:
    """The last write of a tree: from now on it exists."""
    manifest = Manifest(dict(files), meta=dict(meta or {}))
    store.put_bytes(join(prefix, MANIFEST), manifest.as_json())
    return manifest


def upload_tree(store: Store, prefix: str, folder: Path, meta: dict | None = None) -> Manifest:
    """Every file of `folder` under `prefix`, then the manifest."""
    return write_manifest(store, prefix, upload_files(store, prefix, folder, local_files(folder)), meta)


def read_manifest(store: Store, prefix: str) -> Manifest | None:
    """The tree's manifest, or None when there is no (complete) tree at `prefix`."""
    key = join(prefix, MANIFEST)
    try:
        data = store.get_bytes(key)
    except ObjectMissing:
        return None
    try:
        return Manifest.from_json(data)
    except StorageError as exc:
        raise StorageError(f"{key} in {store.describe()}: {exc}") from None


def delete_tree(store: Store, prefix: str) -> int:
    """Manifest first (the tree stops existing at once), then its files; returns objects deleted."""
    manifest = join(prefix, MANIFEST)
    had_manifest = store.exists(manifest)
    store.delete(manifest)
    return store.delete_prefix(prefix) + had_manifest

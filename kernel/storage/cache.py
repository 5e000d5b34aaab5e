"""A host's staging cache: stored files copied to local disk once, by content.

Objects live at `<root>/objects/<sha256>`: a file downloaded for one job serves every later job that
names the same content (the same model, dataset or checkpoint shard), whatever its key. Each download
is checked against the manifest's size and SHA-256 before it is kept (a corrupt or truncated copy is
deleted and the staging fails, naming the key). A staged tree is a folder of hard links to objects,
so evicting an object never breaks a run that is using it. The cache keeps its total under
`cap_bytes` by evicting the least recently used objects (not the ones the current staging needs).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kernel.storage.base import StorageError, Store, join
from kernel.storage.trees import FileEntry, Manifest, read_manifest, sha256_file

DEFAULT_CAP_BYTES = 20 << 30


class StagingCache:
    def __init__(self, root: Path, cap_bytes: int = DEFAULT_CAP_BYTES) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.cap_bytes = cap_bytes
        self.objects.mkdir(mode=0o700, parents=True, exist_ok=True)

    def object_path(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise StorageError(f"invalid SHA-256 {sha256!r}")
        return self.objects / sha256

    def has(self, entry: FileEntry) -> bool:
        target = self.object_path(entry.sha256)
        return target.is_file() and target.stat().st_size == entry.size

    def fetch(self, store: Store, key: str, entry: FileEntry) -> Path:
        """The object for `entry`, downloaded from `key` unless the cache has it; marked as just used."""
        target = self.object_path(entry.sha256)
        if self.has(entry):
            os.utime(target)
            return target
        fd, tmp_name = tempfile.mkstemp(dir=self.objects, prefix=".download-")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            store.get_file(key, tmp)
            size, digest = tmp.stat().st_size, sha256_file(tmp)
            if (size, digest) != (entry.size, entry.sha256):
                raise StorageError(
                    f"{key}: downloaded {size} bytes with SHA-256 {digest[:12]}…, the manifest says "
                    f"{entry.size} bytes, {entry.sha256[:12]}… (corrupt or changed in storage)"
                )
            tmp.chmod(0o400)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target

    def adopt(self, path: Path, entry: FileEntry) -> None:
        """Keep a file this host just uploaded as the object for `entry` (a hard link, no copy), so a
        later staging of it on this host downloads nothing."""
        target = self.object_path(entry.sha256)
        if target.exists():
            return
        tmp = self.objects / f".download-adopt-{os.getpid()}-{entry.sha256[:16]}"
        tmp.unlink(missing_ok=True)
        try:
            os.link(path, tmp)
        except OSError:
            return  # another filesystem: the next staging downloads it
        os.replace(tmp, target)

    def stage_tree(
        self,
        store: Store,
        prefix: str,
        dest: Path,
        select: Callable[[str], bool] | None = None,
    ) -> Manifest:
        """Link the tree's (selected) files into `dest`; raises StorageError if the tree doesn't exist."""
        manifest = read_manifest(store, prefix)
        if manifest is None:
            where = store.describe()
            raise StorageError(f"nothing stored at {prefix!r} in {where} (no manifest: missing or incomplete)")
        wanted = {name: entry for name, entry in manifest.files.items() if select is None or select(name)}
        missing = [join(prefix, name) for name, entry in sorted(wanted.items()) if not self.has(entry)]
        store.expect("GET", missing)
        for name, entry in sorted(wanted.items()):
            link_into(self.fetch(store, join(prefix, name), entry), Path(dest) / name)
        self.evict(keep={entry.sha256 for entry in wanted.values()})
        return manifest

    def size(self) -> int:
        return sum(size for _, size, _ in self._objects())

    def _objects(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of each object; another process may add or remove some meanwhile."""
        found = []
        for path in self.objects.iterdir():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            if path.name.startswith(".download-"):
                if time.time() - stat.st_mtime > 3600:  # a download that died with its process
                    path.unlink(missing_ok=True)
                continue
            found.append((stat.st_mtime, stat.st_size, path))
        return found

    def evict(self, keep: set[str] = frozenset()) -> int:
        """Remove least recently used objects until the cache fits its cap; returns bytes freed."""
        objects = self._objects()
        total, freed = sum(size for _, size, _ in objects), 0
        for _, size, path in sorted(objects):
            if total - freed <= self.cap_bytes:
                break
            if path.name in keep:
                continue
            path.unlink(missing_ok=True)
            freed += size
        return freed


def link_into(source: Path, target: Path) -> None:
    """target becomes a hard link to source (a copy across filesystems), replaced atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and os.path.samefile(source, target):
        return
    tmp = target.with_name(f".link-{target.name}-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)

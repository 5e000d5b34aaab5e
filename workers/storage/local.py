"""A directory as a store (the default for `make run` and a single host)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from workers.storage.base import ObjectMissing, StorageError, Store, StoredObject, check_key

# What opening a key that names no file raises: nothing there, a folder there, or a file where a folder would be.
_NOT_AN_OBJECT = (FileNotFoundError, IsADirectoryError, NotADirectoryError)


class LocalStore(Store):
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = f"file://{self.root}"

    def path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as source:
            self._write(key, lambda out: shutil.copyfileobj(source, out, 1 << 20))

    def put_bytes(self, key: str, data: bytes) -> None:
        self._write(key, lambda out: out.write(data))

    def _write(self, key: str, fill) -> None:
        target = self.path(key)
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        except OSError as exc:  # a file where a folder of the key would be, a full or read-only disk
            raise StorageError(f"can't write {key!r} in {self.url}: {exc}") from None
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException as exc:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise StorageError(f"can't write {key!r} in {self.url}: {exc}") from None
            raise

    def _missing(self, key: str) -> ObjectMissing:
        return ObjectMissing(f"no object {key!r} in {self.url}")

    def get_file(self, key: str, dest: Path) -> None:
        try:
            shutil.copyfile(self.path(key), dest)
        except _NOT_AN_OBJECT:
            raise self._missing(key) from None

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except _NOT_AN_OBJECT:
            raise self._missing(key) from None

    def open(self, key: str) -> BinaryIO:
        try:
            handle = open(self.path(key), "rb")  # noqa: SIM115 - the caller closes it
        except _NOT_AN_OBJECT:
            raise self._missing(key) from None
        if not os.path.isfile(handle.name):  # opening a folder read-only succeeds on some systems
            handle.close()
            raise self._missing(key)
        return handle

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def list(self, prefix: str) -> Iterator[StoredObject]:
        base = self.path(prefix) if prefix else self.root
        if not base.is_dir():
            return
        found = []
        for path in base.rglob("*"):
            if path.is_file() and not path.name.startswith(".tmp-"):
                found.append((path.relative_to(self.root).as_posix(), path))
        for key, path in sorted(found):  # by key, as S3 lists ('a-b' before 'a/b')
            try:
                stat = path.stat()
            except FileNotFoundError:  # deleted since the walk
                continue
            yield StoredObject(key, stat.st_size, stat.st_mtime)

    def delete(self, key: str) -> None:
        path = self.path(key)
        try:
            path.unlink(missing_ok=True)
        except (IsADirectoryError, NotADirectoryError, PermissionError) as exc:
            if path.is_dir() or isinstance(exc, NotADirectoryError):
                return  # no object by that key
            raise StorageError(f"can't delete {key!r} in {self.url}: {exc}") from None
        self._drop_empty_parents(path)

    def delete_prefix(self, prefix: str) -> int:
        folder = self.path(prefix)
        count = sum(1 for _ in self.list(prefix))
        shutil.rmtree(folder, ignore_errors=True)
        self._drop_empty_parents(folder)
        return count

    def _drop_empty_parents(self, path: Path) -> None:
        """Remove the folders a delete left empty, up to the root."""
        for parent in path.parents:
            if parent == self.root or not parent.is_relative_to(self.root):
                break
            try:
                parent.rmdir()
            except OSError:
                break

    def ping(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=self.root, prefix=".tmp-ping-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise StorageError(f"storage directory {self.root} is not writable: {exc}") from None

"""A directory as a store (the default for `make run` and a single host)."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from kernel.storage.base import ObjectMissing, StorageError, Store, StoredObject, check_key

# Opening a key that names no file: nothing there, a folder there, a file where a folder would be, or a
# name this file system can't hold (too long), which can't name an object here either.
_NOT_AN_OBJECT = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_NO_SUCH_NAME = {errno.ENAMETOOLONG, errno.ELOOP}


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
        write_privately(self.path(key), fill, f"{key!r} in {self.url}")

    def _missing(self, key: str) -> ObjectMissing:
        return ObjectMissing(f"no object {key!r} in {self.url}")

    def _read_error(self, key: str, exc: OSError) -> StorageError:
        if isinstance(exc, _NOT_AN_OBJECT) or exc.errno in _NO_SUCH_NAME:
            return self._missing(key)
        return StorageError(f"can't read {key!r} in {self.url}: {exc}")

    def get_file(self, key: str, dest: Path) -> None:
        try:
            shutil.copyfile(self.path(key), dest)
        except OSError as exc:
            raise self._read_error(key, exc) from None

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except OSError as exc:
            raise self._read_error(key, exc) from None

    def open(self, key: str) -> BinaryIO:
        try:
            handle = open(self.path(key), "rb")  # noqa: SIM115 - the caller closes it
        except OSError as exc:
            raise self._read_error(key, exc) from None
        if not os.path.isfile(handle.name):  # opening a folder read-only succeeds on some systems
            handle.close()
            raise self._missing(key)
        return handle

    def exists(self, key: str) -> bool:
        try:
            return self.path(key).is_file()
        except OSError:  # a name too long for this file system names nothing
            return False

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

    def grant_url(self, key: str, method: str, expires_s: int) -> str:
        """The object's file: a folder is one machine's store, and whoever runs there reaches all of it anyway
        (no isolation between the hosts of one machine: docs/STORAGE.md)."""
        return self.path(key).as_uri()

    def ping(self) -> None:
        try:
            _private_folders(self.root)
            fd, probe = tempfile.mkstemp(dir=self.root, prefix=".tmp-ping-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise StorageError(f"storage directory {self.root} is not writable: {exc}") from None


def write_privately(target: Path, fill, what: str) -> None:
    """Write `target` through a 0600 temp file in its (0700) folder, renamed into place: a reader sees the old
    file, none, or the whole new one. `fill(out)` writes the bytes."""
    try:
        _private_folders(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")  # 0600
    except OSError as exc:  # a file where a folder of the key would be, a full or read-only disk
        raise StorageError(f"can't write {what}: {exc}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise StorageError(f"can't write {what}: {exc}") from None
        raise


def _private_folders(folder: Path) -> None:
    """Make `folder` and each missing parent 0700, whatever the umask (a store holds users' data)."""
    if folder.is_dir():
        return
    _private_folders(folder.parent)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:  # made meanwhile by another writer
        if not folder.is_dir():
            raise
        return
    folder.chmod(0o700)

"""The storage interface both backends implement."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


class StorageError(Exception):
    """Storage unreachable, refused, or an object missing or corrupt; the message says which."""


class ObjectMissing(StorageError):
    """The key names no object (reads of a missing object raise this; `exists` says False)."""


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: float  # seconds since the epoch


def check_key(key: str) -> str:
    """A key is a relative, normalised '/'-path: no empty, '.' or '..' parts, no leading '/', no NUL."""
    parts = key.split("/")
    if not key or "\x00" in key or any(part in ("", ".", "..") for part in parts):
        raise StorageError(f"invalid storage key {key!r}")
    return key


def join(*parts: str) -> str:
    return "/".join(part.strip("/") for part in parts if part.strip("/"))


class Store(abc.ABC):
    """Keys are '/'-separated relative paths. Writes of one object are atomic: a reader sees the old
    object, or none, or the whole new one."""

    url: str
    multipart = False  # whether grant_upload can split one object into parts (S3)

    @abc.abstractmethod
    def put_file(self, key: str, path: Path) -> None: ...

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def get_file(self, key: str, dest: Path) -> None:
        """Download to `dest` (written in place; callers download to a temp name and rename)."""

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def open(self, key: str) -> BinaryIO:
        """A readable stream of the object (the caller closes it)."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[StoredObject]:
        """Every object under `prefix/` (recursively), in key order."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object; a missing one is not an error."""

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under `prefix/`; returns how many."""
        keys = [item.key for item in self.list(prefix)]
        for key in keys:
            self.delete(key)
        return len(keys)

    def expect(self, method: str, keys: list[str]) -> None:
        """A hint that these keys are read ("GET") or written ("PUT") next: a store that has each object's URL
        signed for it (grants.GrantStore) asks for them in one request instead of one each."""
        return None

    def grant_url(self, key: str, method: str, expires_s: int) -> str:
        """A URL with which a compute host GETs or PUTs this one object, and nothing else, until it expires:
        what the platform hands hosts instead of credentials (workers/services/storage_grants.py)."""
        raise StorageError(f"{self.describe()} can't grant access to single objects")

    def grant_upload(self, key: str, size: int, expires_s: int) -> dict:
        """A multipart upload for a host (stores with `multipart`): {"upload_id", "part_size", "urls"}."""
        raise StorageError(f"{self.describe()} has no multipart uploads")

    def complete_upload(self, key: str, upload_id: str, etags: list[str]) -> None:
        raise StorageError(f"{self.describe()} has no multipart uploads")

    def abort_upload(self, key: str, upload_id: str) -> None:
        raise StorageError(f"{self.describe()} has no multipart uploads")

    def presigned_url(self, key: str, filename: str, expires_s: int = 900) -> str | None:
        """A time-limited URL the owner's browser downloads from directly; None where the backend
        has none (the local directory: the web streams the file instead)."""
        return None

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise StorageError unless the store answers (readiness checks)."""

    def describe(self) -> str:
        """Where the store is, without secrets."""
        return self.url

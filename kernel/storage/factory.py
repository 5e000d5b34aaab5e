"""STORAGE_URL -> a Store."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from kernel.storage.base import StorageError, Store


def open_store(url: str) -> Store:
    """`file:///dir` or a plain absolute path: a directory; `s3://bucket/prefix`: S3 (boto3's credentials;
    presigned download URLs for STORAGE_PUBLIC_ENDPOINT_URL when set)."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        path = Path(parsed.path if parsed.scheme else url)
        if not path.is_absolute():
            raise StorageError(f"STORAGE_URL {url!r}: a local store needs an absolute path")
        from kernel.storage.local import LocalStore

        return LocalStore(path)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise StorageError(f"STORAGE_URL {url!r}: name a bucket, s3://bucket/prefix")
        from kernel.storage.s3 import S3Store

        return S3Store(
            parsed.netloc, parsed.path, public_endpoint=os.environ.get("STORAGE_PUBLIC_ENDPOINT_URL") or None
        )
    raise StorageError(f"STORAGE_URL {url!r}: unsupported scheme {parsed.scheme!r} (use file:// or s3://)")


def store_from_environment() -> Store | None:
    """The store a compute host was given (STORAGE_URL), or None when it shares the platform's disk."""
    url = os.environ.get("STORAGE_URL", "").strip()
    return open_store(url) if url else None

"""Object storage for a test of its own: the run's S3 (tests/plugins/stores.py) under a fresh prefix, or
a fresh folder when the run's STORAGE_URL is a folder. Set it with `settings.STORAGE_URL = own_store_url(...)`;
`keys(prefix)` then lists what the platform stored, `stored_checkpoint` stores a job's checkpoint as its
ranks would, and `downloaded` reads a download response (following a presigned URL's redirect)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx

from workers.services.storage import platform_store
from workers.storage.trees import upload_tree


def own_store_url(tmp_path: Path) -> str:
    url = os.environ.get("STORAGE_URL", "")
    if url.startswith("s3://"):
        return f"{url.rstrip('/')}/{uuid.uuid4().hex[:12]}"
    return f"file://{tmp_path / 'store'}"


def keys(prefix: str) -> list[str]:
    """Every key the platform's store holds under `prefix`."""
    return [item.key for item in platform_store().list(prefix)]


def stored_checkpoint(job_id: int, step: int, files: dict[str, bytes], scratch: Path, sub: str = "") -> str:
    """A complete checkpoint tree of the job (or its `sub` tree: universal), as its ranks would leave it;
    returns its `store:` path."""
    folder = scratch / f"checkpoint-{job_id}-{step}-{uuid.uuid4().hex[:6]}"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    prefix = f"checkpoints/job-{job_id}/step-{step}" + (f"/{sub}" if sub else "")
    upload_tree(platform_store(), prefix, folder)
    return f"store:{prefix}"


def downloaded(response) -> bytes:
    """What a browser ends up with: a 302 to a presigned URL is followed, a streamed file read."""
    if response.status_code == 302:
        followed = httpx.get(response["Location"])
        assert followed.status_code == 200, followed.text
        return followed.content
    assert response.status_code == 200, response.status_code
    return b"".join(response.streaming_content)

"""Object storage for a test of its own: the run's S3 (tests/support/plugins/stores.py) under a fresh prefix, or
a fresh folder when the run's STORAGE_URL is a folder. Set it with `settings.STORAGE_URL = own_store_url(...)`;
`keys(prefix)` then lists what the platform stored, `stored_checkpoint` stores a job's checkpoint as its
ranks would, and `downloaded` reads a download response (following a presigned URL's redirect).
`grants_answered_here` lets a rank's code in the test process reach storage with its launch's grant, the
platform's side answered by this process (inside the test's transaction)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import httpx
from django.test import Client

from hosts.runtime import staging
from kernel.protocol import PLATFORM_URL_ENV
from kernel.storage import grants
from kernel.storage.trees import upload_tree
from workers.services.storage import platform_store

PLATFORM_HERE = "http://platform.test"


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


class PlatformHere(httpx.BaseTransport):
    """Requests to PLATFORM_HERE go to this process's Django (the test client); the rest to the network."""

    def __init__(self) -> None:
        self.network = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host != "platform.test":
            return self.network.handle_request(request)
        answer = Client().post(
            request.url.path,
            data=request.read(),
            content_type="application/json",
            HTTP_AUTHORIZATION=request.headers.get("authorization", ""),
        )
        return httpx.Response(
            answer.status_code, content=answer.content, headers={"content-type": answer["Content-Type"]}
        )


def grants_answered_here(monkeypatch) -> None:
    """A GrantStore made from now on asks this process's platform for URLs, as a rank asks its platform."""
    monkeypatch.setenv(PLATFORM_URL_ENV, PLATFORM_HERE)
    monkeypatch.setattr(grants, "http_client", lambda: httpx.Client(transport=PlatformHere()))
    staging.storage_for_grant.cache_clear()

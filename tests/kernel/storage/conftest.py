"""Both backends, each under a prefix of the test's own: a temporary folder, and real S3.

S3 is the run's SeaweedFS (tests/support/plugins/stores.py exports STORAGE_URL and the AWS_* variables), or,
when the run was given a STORAGE_URL that is not S3, an embedded SeaweedFS started for these tests.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import boto3
import pytest

from kernel.storage import Store, open_store
from kernel.storage.local import LocalStore
from kernel.storage.s3 import S3Store
from launcher._child import free_port
from launcher.s3 import EmbeddedS3


@pytest.fixture(scope="session")
def s3_root(tmp_path_factory) -> Iterator[S3Store]:
    """An S3Store at the run's S3 URL, or at one of its own server."""
    url = os.environ.get("STORAGE_URL", "")
    if url.startswith("s3://"):
        store = open_store(url)
        assert isinstance(store, S3Store)
        yield store
        return
    server = EmbeddedS3(tmp_path_factory.mktemp("s3"), free_port())
    with server:
        env = server.environment()
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_REGION"],
        )
        yield S3Store(server.bucket, "storage-tests", client=client)


def s3_store_under(root: S3Store, prefix: str) -> S3Store:
    return S3Store(root.bucket, f"{root.prefix}/{prefix}", client=root.client)


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> Store:
    """Each test runs against a directory and against S3, each empty at the start."""
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    return s3_store_under(request.getfixturevalue("s3_root"), uuid.uuid4().hex)


@pytest.fixture
def s3_store(s3_root) -> S3Store:
    return s3_store_under(s3_root, uuid.uuid4().hex)

"""The test run's own S3 (tests/support/plugins/stores.py): started when no STORAGE_URL is given, exported with a
prefix of the run's own and the AWS_* variables every subprocess inherits, and stopped at the end."""

from __future__ import annotations

import argparse
import os

import pytest

from kernel.storage import open_store
from tests.support.plugins import stores

EXPORTED = ("STORAGE_URL", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")


class EarlyConfig:
    """What the hook reads of pytest's config before any plugin is configured."""

    def __init__(self) -> None:
        self.stash = pytest.Stash()
        self.known_args_namespace = argparse.Namespace()


def test_without_a_storage_url_the_run_gets_real_s3_under_a_prefix_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", os.environ.get("DATABASE_URL", "postgres://unused"))
    monkeypatch.setenv("REDIS_URL", os.environ.get("REDIS_URL", "redis://unused"))
    for name in (*EXPORTED, "STAGING_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    config = EarlyConfig()

    stores.pytest_load_initial_conftests(config, None, [])
    try:
        url = os.environ["STORAGE_URL"]
        assert url.startswith("s3://starverse/test-") and os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        assert os.environ["STAGING_CACHE_DIR"].endswith("staging-cache")
        store = open_store(url)
        store.put_bytes("probe", b"works")
        assert store.get_bytes("probe") == b"works"
    finally:
        stores.pytest_unconfigure(config)

    assert not any(name in os.environ for name in (*EXPORTED, "STAGING_CACHE_DIR"))  # and the server is gone


def test_a_storage_url_that_is_given_is_left_alone(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", os.environ.get("DATABASE_URL", "postgres://unused"))
    monkeypatch.setenv("REDIS_URL", os.environ.get("REDIS_URL", "redis://unused"))
    monkeypatch.setenv("STORAGE_URL", "file:///somewhere/else")
    monkeypatch.setenv("STAGING_CACHE_DIR", "/somewhere/cache")
    config = EarlyConfig()

    stores.pytest_load_initial_conftests(config, None, [])
    try:
        assert os.environ["STORAGE_URL"] == "file:///somewhere/else"
        assert os.environ["STAGING_CACHE_DIR"] == "/somewhere/cache"
    finally:
        stores.pytest_unconfigure(config)

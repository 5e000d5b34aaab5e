"""Pytest plugin: real PostgreSQL, Redis and S3 for the test run when none is configured.

Why a plugin hook and not a fixture: pytest-django reads Django settings (and so DATABASE_URL)
in its own `pytest_load_initial_conftests`, before any fixture exists. This hook runs first
(tryfirst) and exports the URLs of throwaway embedded servers; `pytest_unconfigure` stops them.
Each is started only when its variable is unset: DATABASE_URL, REDIS_URL, and STORAGE_URL (an
embedded SeaweedFS, exported with a prefix of this run's own and the AWS_* variables a client needs,
so the platform and every subprocess a test starts store their objects in real S3). The web's staging
cache (STAGING_CACHE_DIR) is a folder of the run's own unless set.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.s3 import EmbeddedS3
from launcher.stores import EmbeddedPostgres, EmbeddedRedis, PortInUse, StoreError, free_port

_Server = EmbeddedPostgres | EmbeddedRedis | EmbeddedS3


class _TestStores:
    """The servers this run started, the folder they live in and the variables we set."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="starverse-test-stores-"))
        self.servers: list[_Server] = []
        self.exported: list[str] = []

    def start(self, variable: str, make: Callable[[int], _Server]) -> _Server:
        """Start one server on a free port (retrying if another process grabs it first)."""
        for attempt in range(3):
            server = make(free_port())
            self.servers.append(server)
            try:
                server.start()
                break
            except PortInUse:
                if attempt == 2:
                    raise
        self.export({variable: server.url})
        return server

    def start_s3(self) -> None:
        """SeaweedFS, with STORAGE_URL under a prefix of this run's own (another run may share a server)."""
        server = self.start("STORAGE_URL", lambda port: EmbeddedS3(self.folder, port))
        assert isinstance(server, EmbeddedS3)
        self.export({**server.environment(), "STORAGE_URL": f"s3://{server.bucket}/test-{secrets.token_hex(6)}"})

    def export(self, variables: dict[str, str]) -> None:
        for variable, value in variables.items():
            os.environ[variable] = value
            if variable not in self.exported:
                self.exported.append(variable)

    def stop(self) -> None:
        """Idempotent: called from pytest_unconfigure and, as a fallback, at interpreter exit."""
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()
        for variable in self.exported:
            os.environ.pop(variable, None)
        self.exported.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


_KEY = pytest.StashKey[_TestStores]()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Runs before pytest-django's own hook of this name, which loads the settings."""
    need_db, need_redis = not os.environ.get("DATABASE_URL"), not os.environ.get("REDIS_URL")
    need_s3 = not os.environ.get("STORAGE_URL")
    options = early_config.known_args_namespace
    if getattr(options, "help", False) or getattr(options, "version", False):
        return
    stores = _TestStores()
    early_config.stash[_KEY] = stores
    atexit.register(stores.stop)  # if pytest never reaches unconfigure (e.g. settings fail to load)
    if not os.environ.get("STAGING_CACHE_DIR"):  # the web's copies of stored files: not the data folder's
        stores.export({"STAGING_CACHE_DIR": str(stores.folder / "staging-cache")})
    try:
        if need_db:
            stores.start("DATABASE_URL", lambda port: EmbeddedPostgres(stores.folder, port, durable=False))
        if need_redis:
            stores.start("REDIS_URL", lambda port: EmbeddedRedis(stores.folder, port))
        if need_s3:
            stores.start_s3()
    except StoreError as exc:
        stores.stop()
        raise pytest.UsageError(f"could not start the embedded stores for the tests:\n{exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    stores = config.stash.get(_KEY, None)
    if stores is not None:
        stores.stop()
        del config.stash[_KEY]

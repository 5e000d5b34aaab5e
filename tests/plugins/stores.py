"""Pytest plugin: real PostgreSQL and Redis for the test run when none is configured.

Why a plugin hook and not a fixture: pytest-django reads Django settings (and so DATABASE_URL)
in its own `pytest_load_initial_conftests`, before any fixture exists. This hook runs first
(tryfirst) and exports the URLs of throwaway embedded servers; `pytest_unconfigure` stops them.
When DATABASE_URL and REDIS_URL are both set, it does nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from portal.local.stores import EmbeddedPostgres, EmbeddedRedis, PortInUse, StoreError, free_port

_Server = EmbeddedPostgres | EmbeddedRedis


class _TestStores:
    """The servers this run started, the folder they live in and the variables we set."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="starverse-test-stores-"))
        self.servers: list[_Server] = []
        self.exported: list[str] = []

    def start(self, variable: str, make: Callable[[int], _Server]) -> None:
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
        os.environ[variable] = server.url
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
    options = early_config.known_args_namespace
    if not (need_db or need_redis) or getattr(options, "help", False) or getattr(options, "version", False):
        return
    stores = _TestStores()
    early_config.stash[_KEY] = stores
    atexit.register(stores.stop)  # if pytest never reaches unconfigure (e.g. settings fail to load)
    try:
        if need_db:
            stores.start("DATABASE_URL", lambda port: EmbeddedPostgres(stores.folder, port, durable=False))
        if need_redis:
            stores.start("REDIS_URL", lambda port: EmbeddedRedis(stores.folder, port))
    except StoreError as exc:
        stores.stop()
        raise pytest.UsageError(f"could not start the embedded stores for the tests:\n{exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    stores = config.stash.get(_KEY, None)
    if stores is not None:
        stores.stop()
        del config.stash[_KEY]

"""Moving the test database between migrations, to check what a migration does to rows written before it."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(target: list[tuple[str, str]]) -> None:
    MigrationExecutor(connection).migrate(target)


def latest() -> list[tuple[str, str]]:
    """Every app's newest migration, to migrate back to: going back in one app also takes back the other
    apps' migrations that depend on it, which migrating that app alone forward would leave out."""
    return MigrationExecutor(connection).loader.graph.leaf_nodes()

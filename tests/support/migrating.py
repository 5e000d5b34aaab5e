"""Moving the test database between migrations, to check what a migration does to rows written before it."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(target: list[tuple[str, str]]) -> None:
    MigrationExecutor(connection).migrate(target)


def latest(app: str) -> list[tuple[str, str]]:
    """The app's newest migration(s), to migrate back to."""
    return [(app, name) for _, name in MigrationExecutor(connection).loader.graph.leaf_nodes(app)]

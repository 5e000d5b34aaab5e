"""A benchmark's throwaway PostgreSQL database, on the server DATABASE_URL names."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def database_url(url: str, name: str) -> str:
    """`url` with its database replaced by `name`."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def recreate_database(url: str, name: str, drop_only: bool = False) -> None:
    """Drop database `name` (closing its connections) and, unless `drop_only`, create it empty."""
    import psycopg

    with psycopg.connect(database_url(url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if not drop_only:
            conn.execute(f"CREATE DATABASE {name}")

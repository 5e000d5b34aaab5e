"""The site's PostgreSQL engine (portal/database): a connection that served a request without an error within
the last half second is trusted without Django's `SELECT 1`; one idle longer is asked, and replaced when
PostgreSQL has dropped it; one dropped inside the window fails one request and is then replaced."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, connection, connections

from portal.database import base
from portal.database.base import ALIVE_BYPASS_S

pytestmark = pytest.mark.django_db(transaction=True)


def a_request(sql: str = "SELECT 1") -> tuple:
    """What Django does around a request that runs one query (close_old_connections at its start and end)."""
    connection.close_if_unusable_or_obsolete()
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()
    finally:
        connection.close_if_unusable_or_obsolete()


def drop(pid: int) -> None:
    """PostgreSQL ends that connection's backend, as a restart would."""
    params = connection.get_connection_params()
    where = {key: params[key] for key in ("dbname", "user", "password", "host", "port") if params.get(key)}
    with psycopg.connect(**where, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.fixture
def health_checks(monkeypatch):
    """The health checks Django runs (is_usable calls)."""
    asked = []
    usable = type(connections["default"]).is_usable

    def counted(self):
        asked.append(self.connection.info.backend_pid)
        return usable(self)

    monkeypatch.setattr(type(connections["default"]), "is_usable", counted)
    return asked


@pytest.fixture
def long_window(monkeypatch):
    """A window no busy machine outlasts between two requests of a test."""
    monkeypatch.setattr(base, "ALIVE_BYPASS_S", 3600.0)


def test_a_connection_that_answered_a_moment_ago_is_not_asked_again(health_checks, long_window):
    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
    a_request()
    a_request()
    a_request()
    assert health_checks == []


def test_a_connection_idle_past_the_window_is_asked_and_replaced_when_postgres_dropped_it(health_checks):
    a_request()
    old = connection.connection.info.backend_pid
    drop(old)
    connection.answered_at -= ALIVE_BYPASS_S  # idle past the window

    assert a_request("SELECT 2") == (2,)
    assert health_checks == [old] and connection.connection.info.backend_pid != old


def test_a_connection_dropped_inside_the_window_fails_one_request_then_is_replaced(health_checks, long_window):
    a_request()
    old = connection.connection.info.backend_pid
    drop(old)

    with pytest.raises(OperationalError):
        a_request()
    assert a_request("SELECT 3") == (3,)
    assert connection.connection.info.backend_pid != old

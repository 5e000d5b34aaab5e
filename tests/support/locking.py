"""Helpers for concurrency tests with real connections: which backend a thread uses, and whether it waits.

A test that interleaves two transactions step by step needs to know when one of them is blocked on
a row lock the other holds; waiting for that (not for a number of seconds) keeps the test's outcome
independent of how busy the machine is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from django.db import connection

PATIENCE_S = 60.0  # a step that takes longer than this is a hang, not a slow machine


def backend_pid() -> int:
    """The PostgreSQL backend serving this thread's connection."""
    connection.ensure_connection()
    return connection.connection.info.backend_pid


def waits_on_a_lock(pid: int) -> bool:
    """True while backend `pid` waits for a lock (pg_locks is read live, not from a snapshot)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", [pid])
        return cursor.fetchone()[0]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds; fail (not pass) if it never does."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {PATIENCE_S:g}s for {what}")
        time.sleep(0.02)


class Worker(threading.Thread):
    """A thread with its own database connection that keeps what its call returned or raised."""

    def __init__(self, call: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.pid: int | None = None
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.pid = backend_pid()
            self.result = self.call()
        except BaseException as error:  # handed to the test, which fails on it
            self.error = error
        finally:
            connection.close()

    def outcome(self) -> object:
        self.join(PATIENCE_S)
        assert not self.is_alive(), "the thread hung"
        if self.error is not None:
            raise self.error
        return self.result

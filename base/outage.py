"""Living through an outage of Redis or PostgreSQL.

Redis: which errors mean "Redis or the broker is unreachable", and a memory of the last such error
so that a request skips Redis for a few seconds instead of waiting on it again. Why a memory: with
Redis paused, a connection is accepted by the kernel and then nothing answers, so every command
waits its full socket timeout. One request pays that once; the next ones in this process see the
outage and go on without Redis at once (caches and throttles fail open, wake-ups and task hints are
left to the periodic passes that read the database).

PostgreSQL: which errors mean "the database is unreachable", and a platform-wide mark of the last
time any process found it so (base.heartbeats, in Redis). While the database is away no agent's
heartbeat can be recorded, so when it is back every node looks silent; the reconciler measures a
node's silence from that mark, not only from its last heartbeat (workers.services.node_lifecycle).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from urllib.parse import urlsplit

import kombu.exceptions
import redis.exceptions
from django.db import InterfaceError, OperationalError

from base import heartbeats

logger = logging.getLogger("base.outage")

# Redis-py's errors (connection refused, timeouts, a server still loading its data) and the broker's
# (kombu wraps the transport's connection errors in OperationalError).
UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, kombu.exceptions.OperationalError)
# Django's wrappers of the database driver's errors: a request that meets one is answered 503 (a lost
# deadlock or a cancelled statement is worth a retry too, but only connection errors mean "away").
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
RETRY_AFTER_S = 5
UNAVAILABLE_CODE = "service_unavailable"  # the `code` of a 503 in the API's error format
DATABASE_MARK = "database_unreachable"
# SQLSTATEs of a server that can't be talked to: connection exceptions (class 08), and one shutting
# down, crashed or still starting. A client-side failure to connect has none.
CONNECTION_STATES = ("08", "57P01", "57P02", "57P03")
MARK_EVERY_S = 1.0


class Outage:
    """Per process: `down()` is true for `cooldown_s` after `failed()`; logs once per outage."""

    def __init__(self, what: str, cooldown_s: float = RETRY_AFTER_S) -> None:
        self.what, self.cooldown_s = what, cooldown_s
        self._until = 0.0
        self._lock = threading.Lock()

    def down(self) -> bool:
        return time.monotonic() < self._until

    def failed(self, error: BaseException) -> None:
        """Remember the failure; the first one of an outage is logged as a warning."""
        with self._lock:
            first = not self.down()
            self._until = time.monotonic() + self.cooldown_s
        if first:
            logger.warning(
                "%s unavailable (%s: %s); going on without it for %gs",
                self.what,
                type(error).__name__,
                error,
                self.cooldown_s,
            )

    def reset(self) -> None:
        """Forget the outage (tests; a caller that saw the service answer again)."""
        self._until = 0.0


_SERVERS: dict[str, Outage] = {}
_SERVERS_LOCK = threading.Lock()


def outage_of(url: str) -> Outage:
    """The one outage memory of the Redis server at `url` (its host and port: its databases share it).

    The cache, the Celery broker and the agent wake-ups usually live on one Redis: once one of them
    finds it unreachable, the others go on without it at once instead of each paying its own timeout.
    """
    server = urlsplit(url).netloc.rpartition("@")[2] or url
    with _SERVERS_LOCK:
        return _SERVERS.setdefault(server, Outage(f"Redis at {server}"))


def forget_outages() -> None:
    """Talk to every server again at once (tests, after they resume a paused Redis)."""
    for outage in list(_SERVERS.values()):
        outage.reset()


def database_unreachable(error: BaseException) -> bool:
    """The error says the database could not be reached (not a deadlock, a timeout or a bad query)."""
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    state = getattr(error.__cause__, "sqlstate", None)
    return state is None or state.startswith(CONNECTION_STATES)


class Every:
    """`due()` is true at most once per `seconds` (per process): a mark per request would be a Redis write each."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self._last = seconds, float("-inf")

    def due(self) -> bool:
        moment = time.monotonic()
        if moment - self._last < self.seconds:
            return False
        self._last = moment
        return True

    def reset(self) -> None:
        self._last = float("-inf")


_DATABASE_MARKS = Every(MARK_EVERY_S)


def note_database_error(error: BaseException, now: datetime | None = None) -> None:
    """Remember, for every process, that the database was unreachable now; `now` (tests) always marks."""
    if database_unreachable(error) and (now is not None or _DATABASE_MARKS.due()):
        heartbeats.mark(DATABASE_MARK, now=now)


def forget_database_outage() -> None:
    """No database outage remembered, platform-wide and in this process (tests)."""
    _DATABASE_MARKS.reset()
    heartbeats.forget(DATABASE_MARK)


def database_last_unreachable() -> datetime | None:
    """When a process last found the database unreachable (None: not since Redis kept the mark)."""
    mark = heartbeats.last(DATABASE_MARK)
    return mark.at if mark else None

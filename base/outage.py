"""Living through a Redis outage: which errors mean "Redis or the broker is unreachable", and a memory
of the last such error so that a request skips Redis for a few seconds instead of waiting on it again.

Why a memory: with Redis paused, a connection is accepted by the kernel and then nothing answers, so
every command waits its full socket timeout. One request pays that once; the next ones in this
process see the outage and go on without Redis at once (caches and throttles fail open, wake-ups and
task hints are left to the periodic passes that read the database).
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import urlsplit

import kombu.exceptions
import redis.exceptions

logger = logging.getLogger("base.outage")

# Redis-py's errors (connection refused, timeouts, a server still loading its data) and the broker's
# (kombu wraps the transport's connection errors in OperationalError).
UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, kombu.exceptions.OperationalError)
RETRY_AFTER_S = 5


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
